#!/usr/bin/env bash
# The Dockerfile's steps on a machine without Docker, as far as they can go, for a manual
# check (not run by CI: it downloads every dependency, about 1.5 minutes):
#   1. the build context as .dockerignore admits it (from git HEAD: pyproject.toml, README.md,
#      streams/, schemas/);
#   2. the build stage's RUN lines, in a fresh virtualenv of the system's Python 3.11;
#   3. the run stage's commands as uid/gid 10001 (setpriv; needs root), with the virtualenv and
#      the work dir not writable by it and HOME the work dir, as in the image: `streams --help`,
#      `streams schemas check`, then `streams worker` and `streams sink duckdb` idle for 20 s
#      and stopped by SIGTERM; and it lists every file uid 10001 wrote outside TMPDIR and the
#      data dir (there should be none: the root file system can be read-only).
# Keep it in step with the Dockerfile. Needs KAFKA_BOOTSTRAP_SERVERS and SCHEMA_REGISTRY_URL;
# the processes use STREAMS_TOPIC_PREFIX=imgcheck, so they find no tenant and touch nothing.
#   deploy/image-without-docker.sh [SCRATCH_DIR]     (default: a new dir under /tmp)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
python=${IMAGE_PYTHON:-/usr/bin/python3.11}
uid=10001
: "${KAFKA_BOOTSTRAP_SERVERS:?set it (and SCHEMA_REGISTRY_URL)}" "${SCHEMA_REGISTRY_URL:?}"
[ "$(id -u)" = 0 ] || { echo "[image] error: run as root (setpriv switches to uid $uid)" >&2; exit 1; }
scratch=${1:-$(mktemp -d /tmp/image-check.XXXXXX)}
mkdir -p "$scratch" && chmod 755 "$scratch"
ctx=$scratch/ctx venv=$scratch/opt-venv src=$scratch/src app=$scratch/app
tmp=$scratch/tmp data=$scratch/data
rm -rf "$ctx" "$venv" "$src" "$app" "$tmp" "$data"
mkdir -p "$ctx" "$src" "$app" "$tmp" "$data"

echo "[image] build context" >&2
git -C "$repo" archive HEAD pyproject.toml README.md streams schemas | tar -x -C "$ctx"

echo "[image] build stage" >&2
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
"$python" -m venv "$venv"
cp "$ctx/pyproject.toml" "$ctx/README.md" "$src/"
(cd "$src" && mkdir streams && touch streams/__init__.py \
  && "$venv/bin/pip" install -q --only-binary=:all: '.[serve,duckdb,langfuse,judges]' \
  && "$venv/bin/pip" uninstall -q -y feedback-streams)
rm -rf "$src/streams" && cp -r "$ctx/streams" "$src/streams"
(cd "$src" && "$venv/bin/pip" install -q --no-deps . && "$venv/bin/python" -m compileall -q "$venv/lib")

echo "[image] run stage as uid $uid" >&2
cp -r "$ctx/schemas" "$app/"
chown "$uid:$uid" "$tmp" "$data"
as_user() {
  # exec: in a background subshell this makes $! the process itself, so SIGTERM reaches it.
  exec setpriv --reuid="$uid" --regid="$uid" --clear-groups env -i PATH="$venv/bin:/usr/bin:/bin" \
    HOME="$app" TMPDIR="$tmp" PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    KAFKA_BOOTSTRAP_SERVERS="$KAFKA_BOOTSTRAP_SERVERS" SCHEMA_REGISTRY_URL="$SCHEMA_REGISTRY_URL" \
    STREAMS_TOPIC_PREFIX=imgcheck "$@"
}
owned() { find / -xdev -uid "$uid" -not -path "/proc/*" 2>/dev/null | sort || true; }
owned_before=$(owned)
cd "$app"
(as_user streams --help >/dev/null)
(as_user streams schemas check)
(as_user streams worker --cursor feedback-mirror --loglevel info --stats-interval 5 \
  >"$scratch/worker.log" 2>&1) &
worker=$!
(as_user streams sink duckdb --path "$data/scores.duckdb" --cursor warehouse \
  >"$scratch/sink.log" 2>&1) &
sink=$!
trap 'kill -TERM "$worker" "$sink" 2>/dev/null || true' EXIT
sleep 20
# The subshell execs setpriv, which execs env, which execs python: one pid all along.
for pid in "$worker" "$sink"; do
  echo "[image] pid $pid: uid $(awk '/^Uid:/ {print $2}' /proc/$pid/status)," \
       "$(awk '/^VmRSS:/ {print $2, $3}' /proc/$pid/status) resident" >&2
done
kill -TERM "$worker" "$sink"
rc=0
wait "$worker" || { echo "[image] error: the worker exited $?" >&2; rc=1; }
wait "$sink" || { echo "[image] error: the sink exited $?" >&2; rc=1; }
written=$(comm -13 <(echo "$owned_before") <(owned) | grep -v -e "^$tmp" -e "^$data" || true)
if [ -n "$written" ]; then
  echo "[image] error: uid $uid wrote outside TMPDIR and the data dir:" >&2
  echo "$written" >&2
  rc=1
fi
[ "$rc" = 0 ] && echo "[image] ok: built, ran as uid $uid, stopped cleanly, wrote only to TMPDIR and $data" >&2
echo "[image] logs: $scratch/worker.log $scratch/sink.log" >&2
exit "$rc"
