#!/usr/bin/env bash
# The MCP Python SDK end to end against examples/notes-app: creates a
# virtual environment here (.venv), installs the pinned SDK from PyPI and
# runs the scenario. NOTES_APP_BIN names the app binary (default: the
# workspace's debug build).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
exec .venv/bin/python sdk_test.py
