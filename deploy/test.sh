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

# The container test builds the image and runs it with podman (tests/deploy/test_container.py;
# deploy/image.sh installs the same when it is missing). A machine where they cannot be
# installed makes that test skip, saying why, rather than failing here.
if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1 \
    || ! command -v mmdebstrap >/dev/null 2>&1; then
  echo "[test] installing podman, runc and mmdebstrap for the container test" >&2
  as_root=""
  if [ "$(id -u)" != 0 ]; then as_root="sudo"; fi
  { $as_root apt-get update -qq && $as_root env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq podman runc mmdebstrap >/dev/null; } \
    || echo "[test] warning: podman could not be installed; the container test will skip" >&2
fi

echo "[test] ruff" >&2
.venv/bin/ruff check streams standins tests bench
echo "[test] mypy" >&2
.venv/bin/mypy
echo "[test] schemas: drift and compatibility" >&2
.venv/bin/python -m streams schemas check
echo "[test] kubernetes manifests: kustomize + kubeconform -strict" >&2
PYTHON=.venv/bin/python "$here/k8s/validate.sh"

# Each group of tests runs at the same time as the others, on a stack of its own (own ports,
# data dir and state dir), so a test that restarts its broker disturbs no other group and
# the waits of one group (session timeouts, kills) overlap the work of the others.
# Extra arguments: one group, on one stack, with those pytest arguments.
if [ "$#" -gt 0 ]; then
  groups=(args)
else
  groups=(integration-a integration-b faults rest)
fi

group_args() {
  # The integration tests are half the suite's time: two groups, files dealt alternately.
  case "$1" in
    integration-a) find tests/integration -name 'test_*.py' | sort | awk 'NR % 2 == 1' ;;
    integration-b) find tests/integration -name 'test_*.py' | sort | awk 'NR % 2 == 0' ;;
    faults) echo "tests/faults" ;;
    rest) echo "tests --ignore=tests/integration --ignore=tests/faults" ;;
  esac
}

run_group() {  # run_group INDEX NAME [pytest args...]: the group's stack, its tests, its rc
  local i=$1 name=$2; shift 2
  local base=$((19000 + 1000 * i))
  export STACK_DATA_DIR="$repo/.stack/test-data-$name"
  export KAFKA_PORT=$((base + 92)) KAFKA_CONTROLLER_PORT=$((base + 93))
  export KAFKA_SASL_PORT=$((base + 94)) KAFKA_SSL_PORT=$((base + 95))
  export REGISTRY_PORT=$((18081 + 100 * i))
  export REGISTRY_MANAGEMENT_PORT=$((18091 + 100 * i))
  export STREAMS_STATE_DIR="$STACK_DATA_DIR/state"
  # The ports its tests pick for their own servers (tests/conftest.py): a slice per group
  # of 27000-32599, so a port one group's test has let go of for a moment (a server
  # restart) is never picked by another group.
  local width=$((5600 / ${#groups[@]}))
  export STREAMS_TEST_PORTS="$((27000 + width * i))-$((27000 + width * i + width - 1))"
  "$here/stack.sh" stop >/dev/null 2>&1 || true
  rm -rf "$STACK_DATA_DIR"
  if ! "$here/stack.sh" start; then
    echo "[test] $name: the stack did not start" >&2
    return 1
  fi
  eval "$("$here/stack.sh" env)"
  local rc=0
  # The group's own temporary folder, in the clone: a failed test's own stacks (their broker
  # logs) stay there to read, where another pytest run on the machine cannot clean them up.
  local tmp="$repo/.stack/pytest-$name"
  .venv/bin/python -m pytest -p no:cacheprovider -ra --durations=15 --basetemp="$tmp" "$@" \
    || rc=$?
  "$here/stack.sh" stop || true
  rm -rf "$STACK_DATA_DIR"
  if [ "$rc" = 0 ]; then rm -rf "$tmp"; fi
  if [ "$rc" = 5 ]; then
    echo "[test] error: pytest collected no tests in group $name" >&2
    return 1
  fi
  return "$rc"
}

pids=()
logs=()
cleanup() {
  for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
}
trap cleanup INT TERM
set -m  # each group in a process group of its own, so an interrupt stops its stack too
for i in "${!groups[@]}"; do
  name=${groups[$i]}
  log="$repo/.stack/test-$name.log"
  logs+=("$log")
  if [ "$name" = args ]; then
    ( run_group "$i" "$name" "$@" ) >"$log" 2>&1 &
  else
    # shellcheck disable=SC2046  # the group's arguments are words
    ( run_group "$i" "$name" $(group_args "$name") ) >"$log" 2>&1 &
  fi
  pids+=($!)
  echo "[test] group $name started (log $log)" >&2
done
set +m
rc=0
started=$SECONDS
for i in "${!pids[@]}"; do
  name=${groups[$i]}
  if wait "${pids[$i]}"; then
    echo "[test] group $name passed ($((SECONDS - started)) s)" >&2
  else
    echo "[test] group $name FAILED ($((SECONDS - started)) s)" >&2
    rc=1
  fi
done
for i in "${!logs[@]}"; do
  echo "===== [test] group ${groups[$i]} =====" >&2
  cat "${logs[$i]}" >&2
done
exit "$rc"
