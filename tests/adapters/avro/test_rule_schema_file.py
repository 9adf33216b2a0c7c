"""The rules' JSON Schema is committed and checked like the Avro schemas."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from streams.adapters.avro.files import RULE_SCHEMA_FILE, check_rule_schema, write_rule_schema

SCHEMAS = Path(__file__).parents[3] / "schemas"


def test_the_committed_rule_schema_matches_the_code() -> None:
    assert check_rule_schema(SCHEMAS) == []


def test_a_drifted_or_missing_rule_schema_is_a_problem_and_write_fixes_it(tmp_path: Path) -> None:
    assert "not committed" in check_rule_schema(tmp_path)[0]
    shutil.copytree(SCHEMAS / "rule", tmp_path / "rule")
    path = tmp_path / RULE_SCHEMA_FILE
    schema = json.loads(path.read_text())
    schema["properties"].pop("description")
    path.write_text(json.dumps(schema))
    assert "differs from streams.core.rules.RULE_SCHEMA" in check_rule_schema(tmp_path)[0]
    assert write_rule_schema(tmp_path) == [path]
    assert check_rule_schema(tmp_path) == []
    assert write_rule_schema(tmp_path) == []
