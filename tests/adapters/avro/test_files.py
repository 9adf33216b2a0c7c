import json
import shutil
from pathlib import Path

import pytest

from streams.adapters.avro import files as schemafiles
from streams.adapters.avro.files import check_schemas, compatibility_problems, write_schemas

REPO_SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"


def test_committed_schemas_match_the_models_and_are_compatible() -> None:
    assert check_schemas(REPO_SCHEMAS) == []


def _record(fields: list[dict[str, object]]) -> dict[str, object]:
    return {"type": "record", "name": "R", "namespace": "t", "fields": fields}


def _history(tmp_path: Path, *versions: dict[str, object]) -> list[tuple[int, Path]]:
    out = []
    for number, schema in enumerate(versions, start=1):
        path = tmp_path / f"v{number}.avsc"
        path.write_text(json.dumps(schema))
        out.append((number, path))
    return out


def test_adding_a_field_with_a_default_is_compatible(tmp_path: Path) -> None:
    v1 = _record([{"name": "a", "type": "string"}])
    v2 = _record([{"name": "a", "type": "string"},
                  {"name": "b", "type": ["null", "long"], "default": None}])
    assert compatibility_problems(_history(tmp_path, v1, v2)) == []


def test_adding_a_required_field_is_refused(tmp_path: Path) -> None:
    v1 = _record([{"name": "a", "type": "string"}])
    v2 = _record([{"name": "a", "type": "string"}, {"name": "b", "type": "long"}])
    problems = compatibility_problems(_history(tmp_path, v1, v2))
    assert len(problems) == 1 and "v2 cannot read data written with v1" in problems[0]


def test_every_earlier_version_is_checked(tmp_path: Path) -> None:
    v1 = _record([{"name": "a", "type": "string"}])
    v2 = _record([{"name": "a", "type": "string"},
                  {"name": "b", "type": "long", "default": 0}])
    v3 = _record([{"name": "a", "type": "long"}, {"name": "b", "type": "long", "default": 0}])
    problems = compatibility_problems(_history(tmp_path, v1, v2, v3))
    assert any("v3 cannot read data written with v1" in p for p in problems)
    assert any("v3 cannot read data written with v2" in p for p in problems)


def test_drift_is_found_and_write_adds_a_version(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "schemas"
    shutil.copytree(REPO_SCHEMAS, copy)
    current = schemafiles.current_schemas()
    name = "streams.feedback.resolution.FeedbackGiven"
    changed = json.loads(json.dumps(current[name]))
    changed["fields"][-1]["type"]["fields"].append(
        {"name": "postmortem", "type": ["null", "string"], "default": None})
    monkeypatch.setattr(schemafiles, "current_schemas", lambda: {**current, name: changed})
    problems = check_schemas(copy)
    newest = max((copy / name).glob("v*.avsc"), key=lambda f: int(f.stem[1:]))
    assert problems == [f"{name}: the model differs from {newest}; run "
                        f"`streams schemas write` and commit the new version"]
    assert write_schemas(copy) == [copy / name / f"v{int(newest.stem[1:]) + 1}.avsc"]
    assert check_schemas(copy) == []
