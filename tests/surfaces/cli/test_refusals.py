"""The command line's refusals, which need no broker."""

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streams.surfaces.cli.app import app
from streams.surfaces.cli.base import ExitCode

runner = CliRunner()


def test_invalid_tenant_name_is_refused() -> None:
    result = runner.invoke(app, ["tenant", "create", "Not.Valid"])
    assert result.exit_code == 2
    assert "invalid tenant name" in result.output


def test_sink_needs_langfuse_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LANGFUSE_PUBLIC_KEY", raising=False)
    monkeypatch.delenv("LANGFUSE_SECRET_KEY", raising=False)
    result = runner.invoke(app, ["sink", "langfuse", "--no-cursor"])
    assert result.exit_code == ExitCode.CONFIG
    assert "LANGFUSE_PUBLIC_KEY" in result.output


def test_unknown_feedback_module_is_refused() -> None:
    result = runner.invoke(app, ["schemas", "check", "--types", "no.such.module"])
    assert result.exit_code == ExitCode.MODULE_FAILED
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
    assert result.exit_code == ExitCode.MODULE_FAILED
    output = " ".join(result.output.split())
    assert "'r:typo' watches 'ns:run_succeeded'" in output
    assert "'run_succeeded'" in output


def test_settings_markdown_prints_the_declared_table() -> None:
    from streams.settings import markdown_table

    result = runner.invoke(app, ["settings", "--markdown"])
    assert result.exit_code == 0
    assert result.output == markdown_table()


def test_settings_shows_values_with_secrets_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMS_PARTITIONS", "9")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-very-secret")
    result = runner.invoke(app, ["settings"])
    assert result.exit_code == 0
    assert "STREAMS_PARTITIONS=9" in result.output
    assert "LANGFUSE_SECRET_KEY=***" in result.output
    assert "sk-very-secret" not in result.output


def test_a_bad_setting_stops_a_command_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    result = runner.invoke(app, ["tenant", "list"])
    assert result.exit_code == ExitCode.CONFIG
    assert "KAFKA_SASL_MECHANISM" in result.output


def test_the_sink_reads_langfuse_keys_through_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk")
    monkeypatch.delenv("LANGFUSE_SECRET_KEY", raising=False)
    result = runner.invoke(app, ["sink", "langfuse", "--no-cursor"])
    assert result.exit_code == ExitCode.CONFIG
    assert "LANGFUSE_SECRET_KEY" in result.output
    assert "LANGFUSE_PUBLIC_KEY" not in result.output.split("set ")[-1]


def test_duckdb_sink_refuses_a_file_it_cannot_open(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "scores.duckdb"
    result = runner.invoke(app, ["sink", "duckdb", "--path", str(missing), "--no-cursor"])
    assert result.exit_code == 2
    assert "cannot open the DuckDB file" in " ".join(result.output.split())


def test_report_refuses_a_window_that_ends_before_it_starts(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", "--tenant", "acme", "--workspace", "prod",
                                 "--out", str(tmp_path), "--since", "2026-12-01",
                                 "--until", "2026-11-01"])
    assert result.exit_code == 2
    assert "is not before --until" in " ".join(result.output.split())
    assert not (tmp_path / "report.html").exists()


def test_report_refuses_a_quality_that_names_no_field(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", "--tenant", "acme", "--workspace", "prod",
                                 "--out", str(tmp_path), "--quality", "quality_score"])
    assert result.exit_code == 2
    assert "FEEDBACK_TYPE.FIELD" in result.output


def test_a_tenant_named_like_the_sinks_prefix_gets_no_principal() -> None:
    # Refused before any call to the broker (none runs at the default address here).
    result = runner.invoke(app, ["tenant", "create", "sink", "--principal"])
    assert result.exit_code == 2
    assert "sinks' consumer-group prefix" in " ".join(result.output.split())


def test_one_password_file_sets_one_tenant(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("pw\n")
    result = runner.invoke(app, ["tenant", "create", "a", "b", "--principal",
                                 "--password-file", str(secret)])
    assert result.exit_code == 2
    assert "one tenant per call" in re.sub(r"[\s│]+", " ", result.output)
