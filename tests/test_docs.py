"""Every import path the README and docs/*.md show imports: the `import` lines of their
Python code blocks, and inline code spans naming a `streams.` module or a name in one."""

from __future__ import annotations

import ast
import importlib
import logging
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```(?:python|py)\n(.*?)```", re.S)
SPAN = re.compile(r"`(streams(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`")
IMPORT_LINE = re.compile(
    r"^\s*(?:from\s+(streams[\w.]*)\s+import\s+([\w, ()]+)|import\s+(streams[\w.]*))")


def _block_imports(code: str) -> list[tuple[str, str | None]]:
    """(module, name or None) of each import of `streams` in a code block."""
    try:
        tree = compile(code, "<doc>", "exec",
                       flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError:  # a snippet with elisions: read its import lines one by one
        found: list[tuple[str, str | None]] = []
        for line in code.splitlines():
            m = IMPORT_LINE.match(line)
            if m and m.group(3):
                found.append((m.group(3), None))
            elif m:
                names = m.group(2).replace("(", "").replace(")", "").split(",")
                found += [(m.group(1), n.strip().split(" as ")[0]) for n in names if n.strip()]
        return found
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.split(".")[0] == "streams"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "streams":
            found += [(node.module or "", a.name) for a in node.names]
    return found


def names_not_modules() -> set[str]:
    """Dotted names under `streams.` that are not import paths: the metric, span-attribute
    and logger names the code spells as strings, and the Avro record names (schemas/) with
    their namespaces."""
    names: set[str] = set()
    for path in (ROOT / "streams").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    re.fullmatch(r"streams(\.\w+)+", node.value):
                names.add(node.value)
    for schema in (ROOT / "schemas").glob("*/*.avsc"):
        parts = schema.parent.name.split(".")
        names |= {".".join(parts[:n]) for n in range(2, len(parts) + 1)}
        namespace = ".".join(parts[:-1])
        # The records named inside it (the envelope, the actor...) are in its namespace.
        names |= {f"{namespace}.{n}" for n in re.findall(r'"name": *"([A-Z]\w*)"',
                                                          schema.read_text())}
    return names


def shown_paths() -> list[tuple[str, str, str | None]]:
    """(doc, module or dotted path, imported name) for every path the docs show."""
    shown: list[tuple[str, str, str | None]] = []
    for doc in DOCS:
        text = doc.read_text()
        rel = doc.relative_to(ROOT).as_posix()
        for block in BLOCK.findall(text):
            shown += [(rel, module, name) for module, name in _block_imports(block)]
        prose = BLOCK.sub("", text)
        shown += [(rel, path, None) for path in SPAN.findall(prose)
                  if path not in NOT_MODULES]
    return sorted(set(shown), key=lambda s: (s[0], s[1], s[2] or ""))


NOT_MODULES = names_not_modules()


def resolves(path: str, name: str | None) -> str | None:
    """None when `path` (a module, or a module then attributes) and `name` resolve, else why
    not."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            target: object = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not module_name.startswith(exc.name):
                return f"importing {module_name} fails: {exc}"
            continue
        if path in logging.Logger.manager.loggerDict:
            return None  # a logger the module makes (`f"{__name__}.kafka"`)
        for attr in parts[cut:] + ([name] if name and name != "*" else []):
            if not hasattr(target, attr):
                try:
                    target = importlib.import_module(f"{module_name}.{attr}")
                except ModuleNotFoundError:
                    return f"{module_name} has no {attr}"
                module_name = f"{module_name}.{attr}"
                continue
            target = getattr(target, attr)
        return None
    return f"no module {path}"


def test_the_docs_show_import_paths() -> None:
    # So the test below cannot pass by finding nothing.
    shown = shown_paths()
    assert ("README.md", "streams", "StreamsClient") in shown
    assert len({doc for doc, _, _ in shown}) > 5
    assert resolves("streams.nowhere", None) is not None
    assert resolves("streams.core.feedback", "NoSuchName") is not None
    assert resolves("streams.core.feedback.Feedback", None) is None
    assert "streams.mirror.scores" in NOT_MODULES  # a metric, not a module


@pytest.mark.parametrize(("doc", "path", "name"), shown_paths())
def test_every_import_path_in_the_docs_imports(doc: str, path: str, name: str | None) -> None:
    problem = resolves(path, name)
    assert problem is None, f"{doc} shows {path}{' import ' + name if name else ''}: {problem}"


TEST_PATH = re.compile(r"\btests/[A-Za-z0-9_/]+\.py\b")


def named_test_files() -> list[tuple[str, str]]:
    """(doc or module, test file) for every test file README.md, docs/*.md and the package's
    docstrings name."""
    sources = [*DOCS, *sorted((ROOT / "streams").rglob("*.py"))]
    return sorted({(s.relative_to(ROOT).as_posix(), path) for s in sources
                   for path in TEST_PATH.findall(s.read_text())})


def test_every_test_file_the_docs_name_exists() -> None:
    named = named_test_files()
    assert any(path == "tests/test_layers.py" for _, path in named)  # not vacuous
    missing = [(where, path) for where, path in named if not (ROOT / path).is_file()]
    assert not missing, f"docs name test files that do not exist: {missing}"
