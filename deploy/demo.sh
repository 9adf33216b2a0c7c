#!/usr/bin/env bash
# The main job on a fresh machine: install, start the local Kafka + registry, create demo
# tenants, run a worker and a producer with a live view of events in and scores out, then
# stop everything this script started. Extra arguments go to `streams demo`.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
"$here/bootstrap.sh"
started_here=0
if ! "$here/stack.sh" status >/dev/null 2>&1; then
  "$here/stack.sh" start
  started_here=1
fi
stop() { if [ "$started_here" = 1 ]; then "$here/stack.sh" stop; fi; }
trap stop EXIT
eval "$("$here/stack.sh" env)"
.venv/bin/python -m streams demo "$@"
