#!/usr/bin/env bash
# The MCP Python SDK end to end against `portcullis serve`: creates a
# virtual environment here (.venv), installs the pinned SDK from PyPI and
# runs the scenarios: sdk_test.py, jwt_test.py (PyJWT checking EdDSA and
# ES256 access tokens against the published key set), then gateway_test.py
# (the SDK's own server as a stdio source behind the gateway).
# PORTCULLIS_BIN names the server binary (default: the workspace's debug
# build).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
.venv/bin/python sdk_test.py
.venv/bin/python jwt_test.py
exec .venv/bin/python gateway_test.py
