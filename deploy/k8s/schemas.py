"""JSON schemas for kubeconform, from packages the registries serve (kubeconform's default
schema source, GitHub, is not reachable from the project's machines).

- Kubernetes kinds: the `kubernetes-validate` wheel (PyPI) ships the OpenAPI definitions of
  each Kubernetes release as JSON schema, one file per kind with `$ref`s into a shared
  `_definitions.json`. kubeconform cannot follow those refs (they are absolute paths on
  kubernetes.io), so each kind the manifests use is written standalone: the kind's schema with
  the definitions it reaches, refs made local. A kind the manifests use that the release does
  not define gets no file, and kubeconform then fails on it ("could not find schema").
- Custom resources: each CRD YAML given (KEDA's, from its Go module) becomes one schema per
  served version, made strict as kubeconform's own openapi2jsonschema.py does: objects with
  declared properties accept no others (unless `x-kubernetes-preserve-unknown-fields`),
  int-or-string fields accept either, `nullable` allows null.

Usage: python deploy/k8s/schemas.py --wheel W --k8s-version v1.34.0 --crd-dir D --out OUT
       RENDERED.yaml...
Writes OUT/k8s/<version>-standalone-strict/<kind>-<group>-<version>.json and
OUT/crds/<group>/<kind>_<version>.json (the layouts the -schema-location templates in
validate.sh name).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

import yaml

DEFS_REF = "/api/_definitions.json#/$defs/"  # in a kind's file
LOCAL_REF = "#/$defs/"  # in _definitions.json, and in the standalone files


def kind_file(api_version: str, kind: str) -> str:
    """The file name kubeconform's `{{ .ResourceKind }}{{ .KindSuffix }}` makes."""
    group, _, version = api_version.rpartition("/")
    suffix = f"-{group.split('.')[0].lower()}-{version.lower()}" if group else \
        f"-{version.lower()}"
    return f"{kind.lower()}{suffix}.json"


def used_kinds(paths: list[Path]) -> set[tuple[str, str]]:
    """(apiVersion, kind) of every object in the rendered manifests."""
    found = set()
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.add((doc["apiVersion"], doc["kind"]))
    return found


def _refs(node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            for prefix in (DEFS_REF, LOCAL_REF):
                if ref.startswith(prefix):
                    out.add(ref[len(prefix):])
        for value in node.values():
            _refs(value, out)
    elif isinstance(node, list):
        for value in node:
            _refs(value, out)


def _localise(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: (LOCAL_REF + v[len(DEFS_REF):] if k == "$ref" and isinstance(v, str)
                    and v.startswith(DEFS_REF) else _localise(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_localise(v) for v in node]
    return node


def standalone(kind_schema: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """The kind's schema with every definition it reaches, under local `#/$defs/` refs."""
    reached: set[str] = set()
    todo: set[str] = set()
    _refs(kind_schema, todo)
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        if name not in definitions:
            raise SystemExit(f"schemas: definition {name} is referenced but not defined")
        _refs(definitions[name], todo)
    out = _localise(kind_schema)
    out.pop("$schema", None)
    out.pop("$id", None)
    out["$defs"] = {name: _localise(definitions[name]) for name in sorted(reached)}
    return dict(out)


def k8s_schemas(wheel: Path, version: str, kinds: set[tuple[str, str]], out: Path) -> int:
    """Write standalone schemas of the built-in kinds used; returns how many."""
    folder = f"kubernetes_validate/kubernetes-json-schema/{version}-local-strict/"
    target = out / "k8s" / f"{version}-standalone-strict"
    target.mkdir(parents=True, exist_ok=True)
    written = 0
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        if folder + "_definitions.json" not in names:
            raise SystemExit(f"schemas: {wheel.name} has no schemas for Kubernetes {version}")
        definitions = json.loads(zf.read(folder + "_definitions.json"))["$defs"]
        for api_version, kind in sorted(kinds):
            name = kind_file(api_version, kind)
            if folder + name not in names:
                continue  # a custom resource, or a kind this release lacks: kubeconform says so
            schema = standalone(json.loads(zf.read(folder + name)), definitions)
            (target / name).write_text(json.dumps(schema))
            written += 1
    return written


def strict(node: Any) -> Any:
    """A CRD's OpenAPI v3 schema as the strict JSON schema kubeconform checks against."""
    if isinstance(node, list):
        return [strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items()}
    if out.pop("x-kubernetes-int-or-string", False) or out.get("format") == "int-or-string":
        out.pop("type", None)
        out.pop("format", None)
        out["oneOf"] = [{"type": "string"}, {"type": "integer"}]
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    preserve = out.get("x-kubernetes-preserve-unknown-fields") is True
    if "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    return out


def crd_schemas(crd_dir: Path, out: Path) -> int:
    """Write one schema per CRD and served version; returns how many."""
    written = 0
    for path in sorted(crd_dir.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            group, kind = spec["group"], spec["names"]["kind"]
            for version in spec["versions"]:
                schema = copy.deepcopy(version.get("schema", {}).get("openAPIV3Schema"))
                if not schema:
                    continue
                target = out / "crds" / group / f"{kind.lower()}_{version['name']}.json"
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(json.dumps(strict(schema)))
                written += 1
    return written


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, required=True)
    parser.add_argument("--k8s-version", required=True)
    parser.add_argument("--crd-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("rendered", type=Path, nargs="+")
    args = parser.parse_args(argv)
    kinds = used_kinds(args.rendered)
    k8s = k8s_schemas(args.wheel, args.k8s_version, kinds, args.out)
    crds = crd_schemas(args.crd_dir, args.out)
    if not crds:
        raise SystemExit(f"schemas: no CustomResourceDefinition under {args.crd_dir}")
    print(f"[k8s] schemas: {k8s} Kubernetes kinds ({args.k8s_version}), {crds} from CRDs",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
