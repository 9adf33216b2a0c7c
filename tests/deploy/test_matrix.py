"""docs/operations.md's "run here / only validated" table is the one the deployment tests'
`@claims` make (tests/deploy/matrix.py)."""

from __future__ import annotations

import re

from tests.conftest import REPO
from tests.deploy.matrix import PARTS, table


def test_the_docs_table_is_made_from_the_tests_claims() -> None:
    text = (REPO / "docs" / "operations.md").read_text()
    found = re.search(r"<!-- deploy-matrix:begin.*?-->\n(.*?)<!-- deploy-matrix:end -->",
                      text, re.S)
    assert found, "docs/operations.md lost its deploy-matrix markers"
    assert found.group(1) == table(), (
        "docs/operations.md's run/validated table differs from the tests' claims: paste the "
        "output of `python -m tests.deploy.matrix` between its markers")


def test_every_part_is_run_or_validated_by_some_test() -> None:
    rows = table().splitlines()[2:]
    assert len(rows) == len(PARTS)
    for part, row in zip(PARTS, rows, strict=True):
        cells = row.split(" | ")
        assert cells[1].strip() or cells[2].strip(), f"no test claims {part.name}"
