#!/usr/bin/env sh
# Counts the lines of Portcullis glue in src/main.rs: code lines (not blank,
# not comments) between `// glue:begin` and `// glue:end`, plus lines ending
# in `// glue`. Fails if there are more than the budget (80, the issue's).
set -eu
cd "$(dirname "$0")"
n=$(awk '
  /\/\/ glue:begin/ { inside = 1; next }
  /\/\/ glue:end/   { inside = 0; next }
  /\/\/ glue$/      { if (!inside) count++; next }
  inside && !/^[[:space:]]*$/ && !/^[[:space:]]*\/\// { count++ }
  END { print count + 0 }
' src/main.rs)
echo "Portcullis glue in examples/notes-app/src/main.rs: $n lines (budget 80)"
[ "$n" -le 80 ]
