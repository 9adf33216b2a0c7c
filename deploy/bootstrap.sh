#!/usr/bin/env bash
# Installs the project into ./.venv (created if missing) with every extra and its dev tools
# (`.[all,dev]`: the demo and the tests use them all), and fetches the
# local stack's jars. Idempotent; safe to run before every demo or test run.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "[bootstrap] error: Python 3.11 or newer is needed ($PYTHON is $("$PYTHON" -V 2>&1))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  echo "[bootstrap] creating .venv" >&2
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "[bootstrap] installing feedback-streams and its dependencies into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[all,dev]'
  touch "$stamp"
fi
"$here/stack.sh" fetch
