#!/usr/bin/env bash
# The whole test suite on a fresh machine: install, lint and type-check, check schemas, start
# a private Kafka + registry (own ports and data dir), run every test, stop the stack.
# Extra arguments go to pytest.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
"$here/bootstrap.sh"

# The report's browser test drives the system's Chromium (Playwright cannot download its own).
if ! command -v chromium >/dev/null 2>&1; then
  echo "[test] installing chromium for the report's browser test" >&2
  as_root=""
  if [ "$(id -u)" != 0 ]; then as_root="sudo"; fi
  $as_root apt-get update -qq
  $as_root apt-get install -y -qq chromium
fi

echo "[test] ruff" >&2
.venv/bin/ruff check streams standins tests bench
echo "[test] mypy" >&2
.venv/bin/mypy
echo "[test] schemas: drift and compatibility" >&2
.venv/bin/python -m streams schemas check
echo "[test] kubernetes manifests: kustomize + kubeconform -strict" >&2
PYTHON=.venv/bin/python "$here/k8s/validate.sh"

# A stack of its own, so a running demo stack is neither used nor disturbed.
export STACK_DATA_DIR=${STACK_DATA_DIR:-$repo/.stack/test-data}
export KAFKA_PORT=${TEST_KAFKA_PORT:-19092}
export KAFKA_CONTROLLER_PORT=${TEST_KAFKA_CONTROLLER_PORT:-19093}
export KAFKA_SASL_PORT=${TEST_KAFKA_SASL_PORT:-19094}
export KAFKA_SSL_PORT=${TEST_KAFKA_SSL_PORT:-19095}
export REGISTRY_PORT=${TEST_REGISTRY_PORT:-18081}
export REGISTRY_MANAGEMENT_PORT=${TEST_REGISTRY_MANAGEMENT_PORT:-18091}
"$here/stack.sh" stop >/dev/null 2>&1 || true
rm -rf "$STACK_DATA_DIR"
trap '"$here/stack.sh" stop; rm -rf "$STACK_DATA_DIR"' EXIT
"$here/stack.sh" start
eval "$("$here/stack.sh" env)"

set +e
.venv/bin/python -m pytest -p no:cacheprovider -ra --durations=30 "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "[test] error: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
