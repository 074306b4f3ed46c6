#!/usr/bin/env bash
# Flash used by a probe image: .vector_table + .text + .rodata + .data (the
# initialised data is stored in flash and copied to RAM at reset).
# Usage: size.sh ELF [BUDGET_KIB]. With a budget, fails when flash exceeds it.
set -euo pipefail
elf=$1
budget_kib=${2:-}
read -r vt text rodata data < <(
  arm-none-eabi-size -A -d "$elf" | awk '
    $1 == ".vector_table" { vt = $2 } $1 == ".text" { t = $2 }
    $1 == ".rodata" { r = $2 } $1 == ".data" { d = $2 }
    END { print vt + 0, t + 0, r + 0, d + 0 }'
)
flash=$((vt + text + rodata + data))
kib() { awk -v b="$1" 'BEGIN { printf "%.1f KiB", b / 1024 }'; }
printf '%s: .text %s, .rodata %s, .data %s, flash %s (%d bytes)' \
  "$(basename "$elf")" "$(kib "$((vt + text))")" "$(kib "$rodata")" "$(kib "$data")" "$(kib "$flash")" "$flash"
if [ -n "$budget_kib" ]; then
  printf ', budget %d KiB\n' "$budget_kib"
  if [ "$flash" -gt $((budget_kib * 1024)) ]; then
    echo "flash over budget by $((flash - budget_kib * 1024)) bytes" >&2
    exit 1
  fi
else
  echo
fi
