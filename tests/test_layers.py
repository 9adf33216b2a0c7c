"""The layout is the architecture: the core is every module under streams/core, found from
the folder, and imports nothing of the shell; adapters never import the runtime or the
surfaces; the runtime never imports the surfaces."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import streams

PACKAGE = Path(streams.__file__).parent

# Libraries that talk to the outside world, and the project's own shell.
SHELL_LIBRARIES = ("faust", "mode", "confluent_kafka", "aiokafka", "httpx", "requests",
                   "langfuse", "opentelemetry", "fastavro", "authlib", "typer", "rich")
LAYERS = {
    "core": ("streams.adapters", "streams.runtime", "streams.surfaces", "streams.testing",
             "streams.settings", "streams.examples"),
    "adapters": ("streams.runtime", "streams.surfaces"),
    "runtime": ("streams.surfaces",),
}


def modules_of(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


def imported(path: Path) -> set[str]:
    """Every module a file imports, at any depth of the file (functions included)."""
    tree = ast.parse(path.read_text())
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names}
    return names | {node.module for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module and not node.level}


def test_the_core_is_found_from_its_folder() -> None:
    found = {p.relative_to(PACKAGE).as_posix() for p in modules_of("core")}
    # A few anchors, so a move of the folder cannot make this test vacuous.
    assert {"core/feedback.py", "core/events.py", "core/ids.py", "core/rules/engine.py",
            "core/scores.py"} <= found


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layers_import_only_inwards(layer: str) -> None:
    for path in modules_of(layer):
        for name in imported(path):
            banned = LAYERS[layer]
            if layer == "core":
                banned = banned + SHELL_LIBRARIES
            hit = [b for b in banned if name == b or name.startswith(b + ".")]
            assert not hit, f"{path.relative_to(PACKAGE)} imports {name}"


def test_importing_the_whole_core_loads_no_shell_library() -> None:
    names = [
        "streams." + ".".join(p.relative_to(PACKAGE).with_suffix("").parts).removesuffix(
            ".__init__")
        for p in modules_of("core")
    ]
    script = (
        "import importlib, json, sys\n"
        f"for n in {names!r}: importlib.import_module(n)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    loaded = json.loads(subprocess.run([sys.executable, "-c", script], check=True,
                                       capture_output=True, text=True).stdout)
    bad = sorted(m for m in loaded if m.split(".")[0] in SHELL_LIBRARIES)
    assert not bad, f"importing streams.core loads {bad}"
