"""A misspelled tenant on the real broker: `streams keys create --tenant acmee` and `streams
rules list --tenant acmee` used to make a key for a tenant that does not exist, and print [],
both with exit code 0 (and `rules archive`/`resolve` acted on nothing). Now each is one line,
"no tenant ...", naming the close name, with the NotFound exit code, and no key is made."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

from streams.settings import Settings
from streams.surfaces.cli.base import ExitCode
from tests.conftest import REPO


def streams(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streams", *args], env=settings.child_env(),
                          capture_output=True, text=True, cwd=str(REPO), timeout=120,
                          check=False)


def test_a_misspelled_tenant_is_not_found(settings: Settings,
                                          tenant_factory: Callable[..., str]) -> None:
    tenant = tenant_factory()
    typo = tenant + "e"
    for args in (["keys", "create", "--tenant", typo, "--user", "ada"],
                 ["rules", "list", "--tenant", typo],
                 ["rules", "archive", "ops:spike", "--tenant", typo, "--workspace", "prod"],
                 ["rules", "resolve", "proposal-1", "--tenant", typo, "--workspace", "prod",
                  "--by", "user:ada"]):
        done = streams(settings, *args)
        assert done.returncode == ExitCode.NOT_FOUND, (args, done.stderr)
        assert done.stdout == ""
        lines = done.stderr.splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith(f"error: no tenant {typo} under prefix "), lines
        assert f"did you mean {tenant}?" in lines[0]

    listed = streams(settings, "keys", "list")
    assert listed.returncode == 0, listed.stderr
    assert all(json.loads(line)["tenant"] != typo for line in listed.stdout.splitlines())
    # The right name still works.
    made = streams(settings, "keys", "create", "--tenant", tenant, "--user", "ada")
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip().startswith("fsk_")
    rules = streams(settings, "rules", "list", "--tenant", tenant)
    assert rules.returncode == 0, rules.stderr
    assert json.loads(rules.stdout) == []
