#!/usr/bin/env bash
# The project's image, built and run with podman: for machines without a Docker engine and
# without a registry to pull base images from (such as the project's own; see
# docs/operations.md, "The image"). With Docker and a registry, `docker build .` is all.
#
#   deploy/image.sh build           build the Dockerfile into $IMAGE_TAG
#   deploy/image.sh probe           exit 0 when podman can run a container here (installs the
#                                   tools and makes the base image first); else say why
#   deploy/image.sh stack           build Kafka and Apicurio Registry images for
#                                   docker-compose.yml from the stack's jars
#                                   (deploy/stack-image/Containerfile): $KAFKA_IMAGE, $REGISTRY_IMAGE
#   deploy/image.sh podman ARGS...  podman with this script's configuration (runc, cgroupfs, no
#                                   default ulimits), e.g. `deploy/image.sh podman ps -a`
#   deploy/image.sh conf            print the path of that configuration: CONTAINERS_CONF=PATH
#                                   makes a plain `podman` (or podman-compose) run here
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
# the base's tarball is kept, default .stack/cache), KAFKA_IMAGE (default
# localhost/feedback-streams-kafka:local), REGISTRY_IMAGE (default
# localhost/feedback-streams-registry:local).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
IMAGE_TAG=${IMAGE_TAG:-localhost/feedback-streams:local}
IMAGE_BASE=${IMAGE_BASE:-localhost/debian-python:3.11}
IMAGE_SUITE=${IMAGE_SUITE:-bookworm}
cache=${STACK_CACHE:-$repo/.stack/cache}
KAFKA_IMAGE=${KAFKA_IMAGE:-localhost/feedback-streams-kafka:local}
REGISTRY_IMAGE=${REGISTRY_IMAGE:-localhost/feedback-streams-registry:local}

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

# The engine's settings in a file rather than flags, so tools that call podman themselves
# (podman-compose, `podman kube play`) run with them too: CONTAINERS_CONF=$(deploy/image.sh conf).
conf="$cache/podman-containers.conf"
write_conf() {
  mkdir -p "$cache"
  local want part
  want=$(printf '[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n')
  if [ -f "$conf" ] && [ "$(cat "$conf")" = "$want" ]; then return; fi
  # A file of its own, then a rename: two scripts writing at once never see half a file.
  part=$(mktemp "$conf.XXXXXX")
  printf '%s\n' "$want" >"$part" && mv -f "$part" "$conf"
}
pm() {
  write_conf
  CONTAINERS_CONF="$conf" podman "$@"
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

# link_or_copy SRC DEST: hard links where the file system allows, else a copy (DEST made anew).
link_or_copy() {
  cp -al "$1" "$2" 2>/dev/null && return
  rm -rf "$2"
  cp -a "$1" "$2"
}

# stack: the Kafka and registry images from the stack's jars. The build context is staged in
# the cache (hard links where the file system allows): the Containerfile's folder, the jars and
# the Java runtime the registry needs (21 or newer; deploy/stack.sh finds it).
stack() {
  ensure_tools
  ensure_base
  STACK_CACHE="$cache" "$here/stack.sh" fetch
  local java_home apicurio ctx="$cache/stack-image"
  java_home=$(STACK_CACHE="$cache" "$here/stack.sh" java-home)
  apicurio=$(STACK_CACHE="$cache" "$here/stack.sh" apicurio-home)
  rm -rf "$ctx" && mkdir -p "$ctx"
  cp -a "$here/stack-image/." "$ctx/"
  # The Java runtime copied with its links followed: some point outside it (a JDK's
  # cacerts into /etc), where the image has nothing.
  cp -aL "$java_home" "$ctx/java"
  link_or_copy "$cache/kafka-lib" "$ctx/kafka-lib"
  link_or_copy "$apicurio" "$ctx/apicurio"
  local began=$SECONDS target tag
  for target in kafka registry; do
    if [ "$target" = kafka ]; then tag=$KAFKA_IMAGE; else tag=$REGISTRY_IMAGE; fi
    say "building $tag (target $target of deploy/stack-image/Containerfile, Java from $java_home)"
    pm build --quiet --network=host --build-arg "BASE_IMAGE=$IMAGE_BASE" --target "$target" \
      -t "$tag" -f "$ctx/Containerfile" "$ctx" >/dev/null
  done
  say "built $KAFKA_IMAGE and $REGISTRY_IMAGE in $((SECONDS - began)) s"
}

probe() {
  ensure_tools
  ensure_base
  pm run --rm --network=host --read-only "$IMAGE_BASE" python -c 'print("[image] podman runs containers here")' >&2
}

case "${1:-}" in
  build) build ;;
  probe) probe ;;
  stack) stack ;;
  podman) shift; pm "$@" ;;
  conf) write_conf; echo "$conf" ;;
  *) die "usage: deploy/image.sh build | stack | probe | conf | podman ARGS..." ;;
esac
