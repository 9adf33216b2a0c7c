"""The command line's refusals, which need no broker."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from streams.surfaces.cli import app

runner = CliRunner()


def test_invalid_tenant_name_is_refused() -> None:
    result = runner.invoke(app, ["tenant", "create", "Not.Valid"])
    assert result.exit_code == 2
    assert "invalid tenant name" in result.output


def test_sink_needs_langfuse_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LANGFUSE_PUBLIC_KEY", raising=False)
    monkeypatch.delenv("LANGFUSE_SECRET_KEY", raising=False)
    result = runner.invoke(app, ["sink", "langfuse", "--no-cursor"])
    assert result.exit_code == 2
    assert "LANGFUSE_PUBLIC_KEY" in result.output


def test_unknown_feedback_module_is_refused() -> None:
    result = runner.invoke(app, ["schemas", "check", "--types", "no.such.module"])
    assert result.exit_code == 2
    assert "cannot import feedback module" in result.output


def test_rules_watching_an_undeclared_event_type_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "typo_rules_module.py").write_text(
        "from streams.core.rules import Rule, on, run\n"
        "RULES = [Rule(name='r:typo', when=on('ns:run_succeeded'), then=run('a'))]\n"
        "ACTIONS = {}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    result = runner.invoke(app, ["worker", "--rules", "typo_rules_module"])
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    assert "'r:typo' watches 'ns:run_succeeded'" in output
    assert "'run_succeeded'" in output
