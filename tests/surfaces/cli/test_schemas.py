"""`streams schemas write/check --types MODULE --dir DIR` on an application's own feedback
types, defined in a module of a temporary folder (registering them is in
tests/integration/test_schemas_register.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from streams.surfaces.cli.app import app
from streams.surfaces.cli.base import ExitCode
from tests.user_modules import UserModules, user_modules

runner = CliRunner()
REPO_SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"

V1 = '''
from typing import Literal

from streams import Feedback


class Helpfulness(Feedback, name="{name}", targets={{"run"}}):
    helpful: bool
    tone: Literal["terse", "warm"]
'''
# Compatible: a new optional field with a default.
V2 = V1 + "    comment: str | None = None\n"
# Incompatible: a new field without a default cannot be read from v1 data.
V3 = V1 + "    stars: int\n"


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[UserModules]:
    yield from user_modules(tmp_path, monkeypatch)


@pytest.fixture
def type_name() -> str:
    return f"helpfulness_{uuid.uuid4().hex[:8]}"


def schemas(*args: str) -> Result:
    result = runner.invoke(app, ["schemas", *args])
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        result.exception
    return result


def test_write_then_check_the_users_types(modules: UserModules, type_name: str,
                                          tmp_path: Path) -> None:
    module = modules.write(V1.format(name=type_name))
    folder = tmp_path / "my-schemas"
    written = schemas("write", "--types", module, "--dir", str(folder))
    assert written.exit_code == 0, written.output
    record = f"streams.feedback.{type_name}.FeedbackGiven"
    # Only the user's own feedback_given record: the project's records are not theirs.
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.avsc")) == [
        f"{record}/v1.avsc"]
    checked = schemas("check", "--types", module, "--dir", str(folder))
    assert checked.exit_code == 0, checked.output
    assert "schemas match their models" in checked.output
    again = schemas("write", "--types", module, "--dir", str(folder))
    assert again.exit_code == 0 and "up to date" in again.output
    assert len(list(folder.rglob("*.avsc"))) == 1


def test_a_changed_model_is_drift_until_written(modules: UserModules, type_name: str,
                                                tmp_path: Path) -> None:
    folder = tmp_path / "schemas"
    first = modules.write(V1.format(name=type_name))
    assert schemas("write", "--types", first, "--dir", str(folder)).exit_code == 0
    modules.unload(first)
    changed = modules.write(V2.format(name=type_name))
    record = f"streams.feedback.{type_name}.FeedbackGiven"
    drift = schemas("check", "--types", changed, "--dir", str(folder))
    assert drift.exit_code == 1
    assert f"{record}: the model differs from {folder / record / 'v1.avsc'}" in drift.output
    written = schemas("write", "--types", changed, "--dir", str(folder))
    assert written.exit_code == 0, written.output
    assert (folder / record / "v2.avsc").exists()
    assert schemas("check", "--types", changed, "--dir", str(folder)).exit_code == 0


def test_an_incompatible_change_is_refused(modules: UserModules, type_name: str,
                                           tmp_path: Path) -> None:
    folder = tmp_path / "schemas"
    first = modules.write(V1.format(name=type_name))
    assert schemas("write", "--types", first, "--dir", str(folder)).exit_code == 0
    modules.unload(first)
    breaking = modules.write(V3.format(name=type_name))
    record = f"streams.feedback.{type_name}.FeedbackGiven"
    refused = schemas("write", "--types", breaking, "--dir", str(folder))
    assert refused.exit_code == 1
    assert "refused, nothing written" in refused.output
    assert "v2 cannot read data written with v1" in refused.output
    assert not (folder / record / "v2.avsc").exists()
    assert schemas("check", "--types", breaking, "--dir", str(folder)).exit_code == 1


def test_modules_that_cannot_be_used_are_clear_errors(modules: UserModules) -> None:
    missing = schemas("check", "--types", "no_such_feedback_module")
    assert missing.exit_code == ExitCode.MODULE_FAILED
    assert "cannot import feedback module 'no_such_feedback_module'" in missing.output
    empty = modules.write("X = 1\n")
    none = schemas("write", "--types", empty)
    assert none.exit_code == ExitCode.MODULE_FAILED
    assert f"module {empty!r} defines no feedback types" in none.output
    broken = modules.write("from streams import Feedback\n\n\n"
                           "class NoTargets(Feedback):\n    ok: bool\n")
    failed = schemas("check", "--types", broken)
    assert failed.exit_code == ExitCode.MODULE_FAILED
    assert f"importing feedback module {broken!r} failed: TypeError" in failed.output
    assert "declares no targets" in failed.output


def test_the_default_is_the_projects_schemas() -> None:
    checked = schemas("check", "--dir", str(REPO_SCHEMAS))
    assert checked.exit_code == 0, checked.output
