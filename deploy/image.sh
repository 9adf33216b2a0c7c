#!/usr/bin/env bash
# The project's image, built and run with podman: for machines without a Docker engine and
# without a registry to pull base images from (such as the project's own; see
# docs/operations.md, "The image"). With Docker and a registry, `docker build .` is all.
#
#   deploy/image.sh build           build the Dockerfile into $IMAGE_TAG
#   deploy/image.sh probe           exit 0 when podman can run a container here (installs the
#                                   tools and makes the base image first); else say why
#   deploy/image.sh podman ARGS...  podman with this script's flags (runc, cgroupfs, no
#                                   default ulimits), e.g. `deploy/image.sh podman ps -a`
#
# What it does, and why:
#   - installs podman, runc and mmdebstrap (Debian's packages) when podman is missing;
#   - runs podman with runc and the cgroupfs manager (crun refuses a v1/v2 hybrid cgroup
#     tree) and a containers.conf without default ulimits (a sandbox that cannot raise
#     RLIMIT_NOFILE refuses them);
#   - makes the base image the Dockerfile's PYTHON_IMAGE argument names from Debian packages
#     (mmdebstrap: python3 3.11, venv, ca-certificates, passwd for useradd) when no image of
#     that tag exists, as `$IMAGE_BASE`, because no registry can be pulled from here;
#   - mounts this machine's pip configuration and CA bundle into the build (pip inside it
#     reaches the package index the way pip outside does), at the same paths, read-only.
# Settings (environment): IMAGE_TAG (default localhost/feedback-streams:local), IMAGE_BASE
# (default localhost/debian-python:3.11), IMAGE_SUITE (default bookworm), STACK_CACHE (where
# the base's tarball is kept, default .stack/cache).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
IMAGE_TAG=${IMAGE_TAG:-localhost/feedback-streams:local}
IMAGE_BASE=${IMAGE_BASE:-localhost/debian-python:3.11}
IMAGE_SUITE=${IMAGE_SUITE:-bookworm}
cache=${STACK_CACHE:-$repo/.stack/cache}

say() { echo "[image] $*" >&2; }
die() { echo "[image] error: $*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

ensure_tools() {
  if command -v podman >/dev/null 2>&1 && command -v runc >/dev/null 2>&1 \
      && command -v mmdebstrap >/dev/null 2>&1; then
    return
  fi
  say "installing podman, runc and mmdebstrap (Debian packages)"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap \
    >/dev/null
}

conf="$cache/containers.conf"
pm() {
  mkdir -p "$cache"
  if [ ! -f "$conf" ]; then
    printf '[containers]\ndefault_ulimits = []\n' >"$conf"
  fi
  CONTAINERS_CONF="$conf" podman --runtime runc --cgroup-manager=cgroupfs "$@"
}

ensure_base() {
  if pm image exists "$IMAGE_BASE"; then
    return
  fi
  local tar="$cache/base-$IMAGE_SUITE.tar"
  if [ ! -s "$tar" ]; then
    say "making the base image from Debian $IMAGE_SUITE packages (mmdebstrap, about a minute)"
    mkdir -p "$cache"
    mmdebstrap --quiet --variant=apt \
      --include=python3,python3-venv,python-is-python3,ca-certificates,passwd \
      "$IMAGE_SUITE" "$tar.part.tar"  # the name's ending picks the tarball format
    mv "$tar.part.tar" "$tar"
  fi
  say "importing $tar as $IMAGE_BASE"
  pm import --quiet "$tar" "$IMAGE_BASE" >/dev/null
}

build() {
  ensure_tools
  ensure_base
  local mounts=()
  # pip's configuration and CA bundle, as pip on this machine has them (when it has them).
  local cert=${PIP_CERT:-}
  for f in /etc/pip.conf "$cert"; do
    if [ -n "$f" ] && [ -f "$f" ]; then mounts+=(-v "$f:$f:ro"); fi
  done
  say "building $IMAGE_TAG from the Dockerfile (base $IMAGE_BASE)"
  local began=$SECONDS
  pm build --quiet --network=host --build-arg "PYTHON_IMAGE=$IMAGE_BASE" \
    "${mounts[@]}" -t "$IMAGE_TAG" "$repo" >/dev/null
  say "built $IMAGE_TAG in $((SECONDS - began)) s"
}

probe() {
  ensure_tools
  ensure_base
  pm run --rm --network=host --read-only "$IMAGE_BASE" python -c 'print("[image] podman runs containers here")' >&2
}

case "${1:-}" in
  build) build ;;
  probe) probe ;;
  podman) shift; pm "$@" ;;
  *) die "usage: deploy/image.sh build | probe | podman ARGS..." ;;
esac
