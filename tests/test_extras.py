"""Each optional extra, missing, fails with one line naming it: the CLI command that needs it
is run in a subprocess whose `sys.modules` holds None for one of the extra's libraries (so its
import fails as if it were not installed), and must print exactly one line and exit 69."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import streams
from streams.core.errors import MissingExtra, StreamsError
from streams.extras import EXTRAS, needs, require

PACKAGE = Path(streams.__file__).parent

RUN_CLI = (
    "import sys\n"
    "sys.modules[sys.argv[1]] = None\n"
    "sys.argv = ['streams', *sys.argv[2:]]\n"
    "from streams.surfaces.cli.app import main\n"
    "main()\n"
)

CASES = [
    # (extra, the library made missing, the command, what the line says needs it)
    ("serve", "fastapi", ["serve", "--print-openapi"], "streams serve"),
    ("serve", "uvicorn", ["serve"], "streams serve"),
    ("serve", "mcp", ["serve", "--print-openapi"], "streams serve"),
    ("mcp", "mcp", ["mcp"], "streams mcp"),
    ("mcp", "fastapi", ["mcp"], "streams mcp"),
    ("duckdb", "duckdb", ["sink", "duckdb", "--path", "scores.duckdb"], "the DuckDB sink"),
    ("langfuse", "langfuse", ["sink", "langfuse"], "the Langfuse sink"),
    ("langfuse", "orjson", ["sink", "sync-configs"], "the Langfuse sink"),
    ("demo", "httpx", ["demo"], "streams demo"),
    ("demo", "duckdb", ["demo"], "streams demo"),
    ("demo", "fastapi", ["demo"], "streams demo"),
]


@pytest.mark.parametrize(("extra", "library", "args", "feature"), CASES,
                         ids=[f"{c[0]}-without-{c[1]}" for c in CASES])
def test_a_command_whose_extra_is_missing_prints_one_line_naming_it(
        extra: str, library: str, args: list[str], feature: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", RUN_CLI, library, *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [f"error: {feature} needs the '{extra}' extra: pip install "
                     f"'feedback-streams[{extra}]' (module '{library}' is not installed)"], \
        done.stderr
    assert done.returncode == MissingExtra.exit_code == 69
    assert done.stdout == ""


def test_the_judges_without_httpx_raise_missing_extra_naming_judges() -> None:
    script = ("import sys\nsys.modules['httpx'] = None\n"
              "from streams.core.errors import MissingExtra\n"
              "try:\n    import streams.adapters.chat\n"
              "except MissingExtra as exc:\n    print(exc)\n    sys.exit(exc.exit_code)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 69, done.stderr
    assert done.stdout.strip() == ("the LLM judges needs the 'judges' extra: pip install "
                                   "'feedback-streams[judges]' (module 'httpx' is not "
                                   "installed)")


def test_every_case_is_one_of_the_extras_and_every_extra_has_a_case() -> None:
    assert {extra for extra, *_ in CASES} | {"judges"} == set(EXTRAS)
    for extra, library, *_ in CASES:
        assert library in EXTRAS[extra], (extra, library)


def test_needs_turns_an_import_error_into_missing_extra() -> None:
    with pytest.raises(MissingExtra) as raised, needs("duckdb", "the warehouse"):
        import streams_no_such_module  # type: ignore[import-not-found]  # noqa: F401
    error = raised.value
    assert isinstance(error, StreamsError) and isinstance(error, ImportError)
    assert (error.extra, error.feature, error.missing) == (
        "duckdb", "the warehouse", "streams_no_such_module")
    assert isinstance(error.__cause__, ModuleNotFoundError)


def test_an_inner_missing_extra_is_named_by_the_outer_feature() -> None:
    with pytest.raises(MissingExtra) as raised, needs("serve", "streams serve"), \
            needs("mcp", "the MCP tools"):
        raise ModuleNotFoundError("No module named 'mcp'", name="mcp.server")
    assert str(raised.value) == ("streams serve needs the 'serve' extra: pip install "
                                 "'feedback-streams[serve]' (module 'mcp' is not installed)")


def test_require_imports_the_extras_modules_and_rejects_an_unknown_extra() -> None:
    require("duckdb", "the warehouse")  # installed here (dev pulls in all)
    with pytest.raises(ValueError, match="unknown extra 'warehouse'"):
        require("warehouse", "the warehouse")


def test_the_package_imports_no_stand_in_and_no_test_module() -> None:
    # The stand-ins live beside the package (standins/), not in the wheel: only the demo's
    # --langfuse path loads them, by name, from a clone.
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names} | {
            node.module for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and not node.level}
        bad = sorted(n for n in names if n.split(".")[0] in {"standins", "tests"}
                     and path.name != "demo.py")
        assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"
