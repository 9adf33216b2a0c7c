#!/usr/bin/env bash
# Renders the kustomizations and checks every object against the Kubernetes and KEDA schemas
# with kubeconform -strict (unknown fields, wrong types and kinds without a schema all fail).
#
#   deploy/k8s/validate.sh [KUSTOMIZATION_DIR...]   (default: deploy/k8s/base and every overlay)
#
# Everything comes from package registries, pinned, and is cached under $K8S_TOOLS
# (default .stack/k8s-tools, gitignored): kubeconform and kustomize built with `go install`,
# KEDA's CRDs from its Go module, the Kubernetes schemas from the kubernetes-validate wheel
# (PyPI), turned into kubeconform's layout by deploy/k8s/schemas.py. The rendered manifests and
# schemas go to $K8S_OUT (default: a temporary dir, removed at exit).
# A cold cache takes about a minute and a half on the 2-core machine; a warm one a few seconds.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

KUBECONFORM_VERSION=v0.8.0
KUSTOMIZE_VERSION=v5.8.1
KEDA_VERSION=v2.21.0
K8S_SCHEMA_PACKAGE=kubernetes-validate==1.37.0
K8S_VERSION=${K8S_VERSION:-1.34.0}

tools=${K8S_TOOLS:-$repo/.stack/k8s-tools}
python=${PYTHON:-$repo/.venv/bin/python}
go=${GO:-$(command -v go || echo /usr/local/go/bin/go)}

fail() { echo "[k8s] error: $*" >&2; exit 1; }
[ -x "$go" ] || fail "no Go toolchain (set GO=/path/to/go): kubeconform and kustomize are built with it"
[ -x "$python" ] || fail "no Python at $python (set PYTHON): the schemas are made with it"

mkdir -p "$tools/bin"
export GOMODCACHE="$tools/go/mod" GOCACHE="$tools/go/build" GOTOOLCHAIN=local GOFLAGS="-modcacherw -buildvcs=false"

# go install NAME PACKAGE VERSION: $tools/bin/NAME-VERSION, built once.
install_tool() {
  local name=$1 package=$2 version=$3 bin="$tools/bin/$1-$3"
  if [ ! -x "$bin" ]; then
    echo "[k8s] building $name $version (go install)" >&2
    local tmp
    tmp=$(mktemp -d "$tools/bin/.$name.XXXXXX")
    GOBIN="$tmp" "$go" install "$package@$version" || { rm -rf "$tmp"; return 1; }
    mv "$tmp/$name" "$bin"
    rm -rf "$tmp"
  fi
}
install_tool kubeconform github.com/yannh/kubeconform/cmd/kubeconform "$KUBECONFORM_VERSION" &
kc_pid=$!
install_tool kustomize sigs.k8s.io/kustomize/kustomize/v5 "$KUSTOMIZE_VERSION" &
kz_pid=$!
wait "$kc_pid" || fail "could not build kubeconform $KUBECONFORM_VERSION"
wait "$kz_pid" || fail "could not build kustomize $KUSTOMIZE_VERSION"
kubeconform="$tools/bin/kubeconform-$KUBECONFORM_VERSION"
kustomize="$tools/bin/kustomize-$KUSTOMIZE_VERSION"

# KEDA's CRDs, from its Go module (the module zip holds config/crd/bases).
keda_dir=$("$go" mod download -json "github.com/kedacore/keda/v2@$KEDA_VERSION" \
  | "$python" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])') \
  || fail "could not download the KEDA module $KEDA_VERSION"
crds="$keda_dir/config/crd/bases"
[ -d "$crds" ] || fail "the KEDA module $KEDA_VERSION has no config/crd/bases"

# The Kubernetes schemas, from the kubernetes-validate wheel.
wheels="$tools/pip"
wheel=$(ls "$wheels"/kubernetes_validate-"${K8S_SCHEMA_PACKAGE#*==}"-*.whl 2>/dev/null | head -n1 || true)
if [ -z "$wheel" ]; then
  echo "[k8s] downloading $K8S_SCHEMA_PACKAGE (Kubernetes JSON schemas)" >&2
  "$python" -m pip download -q --no-deps --only-binary=:all: -d "$wheels" "$K8S_SCHEMA_PACKAGE" \
    || fail "could not download $K8S_SCHEMA_PACKAGE"
  wheel=$(ls "$wheels"/kubernetes_validate-"${K8S_SCHEMA_PACKAGE#*==}"-*.whl | head -n1)
fi

if [ -n "${K8S_OUT:-}" ]; then
  out=$K8S_OUT
  mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi

if [ "$#" -eq 0 ]; then
  set -- "$here/base" "$here"/overlays/*/
fi
rendered=()
for dir in "$@"; do
  dir=${dir%/}
  name=$(basename "$dir")
  [ "$name" = base ] || name="overlay-$name"
  "$kustomize" build "$dir" > "$out/$name.yaml" || fail "kustomize build $dir failed"
  rendered+=("$out/$name.yaml")
  echo "[k8s] rendered $dir -> $out/$name.yaml" >&2
done

rm -rf "$out/schemas"
"$python" "$here/schemas.py" --wheel "$wheel" --k8s-version "v$K8S_VERSION" --crd-dir "$crds" \
  --out "$out/schemas" "${rendered[@]}"

echo "[k8s] kubeconform -strict, Kubernetes $K8S_VERSION, KEDA $KEDA_VERSION" >&2
# (its summary line ends without a newline: the echos add one)
if ! "$kubeconform" -strict -summary -kubernetes-version "$K8S_VERSION" \
  -schema-location "$out/schemas/k8s/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
  -schema-location "$out/schemas/crds/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json" \
  "${rendered[@]}"; then
  echo
  fail "the manifests do not match their schemas (above)"
fi
echo
