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
    "core": ("streams.adapters", "streams.runtime", "streams.surfaces", "standins",
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


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def import_graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports, at any depth (TYPE_CHECKING blocks and
    function bodies included: a cycle hidden in a function is still a cycle). `from a import
    b` points at the module a.b when b is one, else at a."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.add(full if full in modules else base)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycles_finds_a_cycle() -> None:
    # So the test below cannot pass by finding nothing.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = import_graph()
    assert "streams.runtime.root" in graph["streams.runtime.worker.app"]


def test_the_package_has_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles (each a set of modules that import each other): " + \
        "; ".join(" <-> ".join(c) for c in found)


# The clients of the outside world, and the project's wrappers that build them inside: only
# the composition root (streams/runtime/root.py) and the adapters construct these.
CLIENTS = frozenset({
    "Producer", "Consumer", "AdminClient", "SchemaRegistryClient", "AsyncClient", "Client",
    "Langfuse", "AIOKafkaConsumer", "AIOKafkaProducer", "AIOKafkaAdminClient",
    "TenantAdmin", "TenantAccess", "TopicReader", "TopicTail", "EventLog", "TenantIndex",
    "AvroSerde", "Delivery", "FastCodec",
})
# Where clients may be built. faust.App is not among the clients: the worker makes it, from
# the runtime's faust_settings().
DOORS = ("runtime/root.py", "adapters/")


def constructions(tree: ast.AST) -> list[tuple[int, str]]:
    """The calls of a client's name in a module (`Producer(...)`, `httpx.AsyncClient(...)`,
    `confluent_kafka.Consumer(...)`), with their lines. `Client` counts only as an attribute
    (`httpx.Client`): a bare `Client` is too common a name."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in CLIENTS and func.id != "Client":
            found.append((node.lineno, func.id))
        elif isinstance(func, ast.Attribute) and func.attr in CLIENTS:
            found.append((node.lineno, ast.unparse(func)))
    return found


def test_constructions_finds_every_spelling() -> None:
    # So the test below cannot pass by finding nothing.
    source = ("p = Producer(c)\nh = httpx.AsyncClient()\nk = confluent_kafka.Consumer(c)\n"
              "s = Settings()\nClient()\nhttpx.Client()\n")
    assert [name for _line, name in constructions(ast.parse(source))] == [
        "Producer", "httpx.AsyncClient", "confluent_kafka.Consumer", "httpx.Client"]
    root = constructions(ast.parse((PACKAGE / "runtime" / "root.py").read_text()))
    assert {"Producer", "Consumer", "SchemaRegistryClient", "TenantAdmin", "AvroSerde",
            "Delivery", "EventLog", "TopicReader", "TopicTail", "TenantIndex",
            "FastCodec", "httpx.AsyncClient", "Langfuse"} <= {name for _l, name in root}


def test_only_the_composition_root_and_the_adapters_construct_clients() -> None:
    outside = [
        f"{path.relative_to(PACKAGE).as_posix()}:{line} {name}(...)"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not path.relative_to(PACKAGE).as_posix().startswith(DOORS)
        for line, name in constructions(ast.parse(path.read_text()))
    ]
    assert not outside, ("clients constructed outside streams/runtime/root.py and "
                         "streams/adapters/ (ask the Runtime for them): " + ", ".join(outside))


# The runtime's rooms, lowest first: each imports only the rooms before it (docs/design.md).
RUNTIME_ROOMS = ["observe", "root", "batch", "client", "worker", "sink", "jobs"]


def test_the_runtime_rooms_import_only_lower_rooms() -> None:
    found = {p.relative_to(PACKAGE / "runtime").parts[0].removesuffix(".py")
             for p in (PACKAGE / "runtime").iterdir() if p.name != "__init__.py"
             and not p.name.startswith("__")}
    assert found == set(RUNTIME_ROOMS), "a new runtime room: give it its place in the order"
    rank = {room: i for i, room in enumerate(RUNTIME_ROOMS)}

    def room(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if parts[:2] == ["streams", "runtime"] and len(parts) > 2 else None

    upward = sorted((m, t) for m, targets in import_graph().items() for t in targets
                    if (a := room(m)) in rank and (b := room(t)) in rank and rank[b] > rank[a])
    assert not upward, f"runtime modules importing a higher room: {upward}"
