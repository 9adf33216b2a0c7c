"""The Dockerfile, checked without Docker (the project's machine has no engine): its shape
(multi-stage, slim Python base, not root, `streams` as the entrypoint, only what it needs in
the build context), and that every command the Kubernetes manifests and the compose file run
exists in the CLI with the options they pass."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.deploy.manifests import REPO, image_commands
from tests.deploy.matrix import claims

DOCKERFILE = REPO / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def stages() -> list[list[tuple[str, str]]]:
    """The instructions of each stage (a stage starts at FROM)."""
    out: list[list[tuple[str, str]]] = []
    for ins in instructions():
        if ins[0] == "FROM":
            out.append([])
        if out:
            out[-1].append(ins)
    return out


@claims("`Dockerfile`", "validated",
        "multi-stage on `python:3.11-slim`")
def test_the_image_is_multi_stage_on_slim_python() -> None:
    args = dict(a.split("=", 1) for w, a in instructions() if w == "ARG" and "=" in a)
    base = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.1[12]-slim(-\w+)?", base), base
    built = stages()
    assert len(built) >= 2
    assert built[0][0][1] == "${PYTHON_IMAGE} AS build"
    assert built[-1][0][1] == "${PYTHON_IMAGE}"
    final = built[-1]
    copied = [a for w, a in final if w == "COPY"]
    assert any(a.startswith("--from=build /opt/venv") for a in copied), copied
    # No compiler, no pip run in the final stage: it gets the built virtualenv only.
    assert not any("pip install" in a for w, a in final if w == "RUN")


@claims("`Dockerfile`", "validated",
        "non-root uid 10001")
def test_the_image_runs_as_a_user_that_is_not_root() -> None:
    final = stages()[-1]
    users = [a for w, a in final if w == "USER"]
    assert users, "the final stage sets no USER"
    uid_arg = dict(a.split("=", 1) for w, a in final if w == "ARG" and "=" in a)["UID"]
    user = users[-1].replace("${UID}", uid_arg).split(":")[0]
    assert user.isdigit() and int(user) != 0, user
    # The manifests' securityContext names the same uid, so runAsNonRoot can check it.
    for name, text in (("worker", "worker.yaml"), ("serve", "serve.yaml")):
        manifest = (REPO / "deploy" / "k8s" / "base" / text).read_text()
        assert f"runAsUser: {user}" in manifest, name


@claims("`Dockerfile`", "validated",
        "`ENTRYPOINT [\"streams\"]`")
def test_the_entrypoint_is_the_projects_console_script() -> None:
    final = stages()[-1]
    entry = [a for w, a in final if w == "ENTRYPOINT"]
    assert entry == ['["streams"]']
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["streams"] == "streams.surfaces.cli.app:main"
    env = " ".join(a for w, a in final if w == "ENV")
    assert "PATH=/opt/venv/bin:$PATH" in env


@claims("`Dockerfile`", "validated",
        "only what `.dockerignore` admits is copied, and all the copies need")
def test_the_build_context_holds_what_the_copies_need() -> None:
    allowed = {line[1:].rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.startswith("!")}
    # An allow-list: everything is excluded, then what the image needs is let back in.
    assert "*" in (REPO / ".dockerignore").read_text().splitlines()
    for word, rest in instructions():
        if word == "COPY" and not rest.startswith("--from"):
            sources = shlex.split(rest)[:-1]
            for source in sources:
                assert source in allowed, f"COPY {source}: excluded by .dockerignore"
                assert (REPO / source).exists(), source


def image_extras() -> list[str]:
    """The extras the build stage installs: `pip install --only-binary=:all: '.[a,b]'`."""
    found = re.search(r"pip install --only-binary=:all: '\.\[([a-z,]+)\]'",
                      (REPO / "Dockerfile").read_text())
    assert found, "the build stage installs no extras"
    return found.group(1).split(",")


def test_the_image_installs_the_extras_of_its_commands() -> None:
    # serve for `streams serve`, the sinks' extras for `streams sink duckdb | langfuse`.
    assert {"serve", "duckdb", "langfuse"} <= set(image_extras())
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert set(image_extras()) <= set(declared)


@claims("`Dockerfile`", "validated",
        "every dependency resolves to a linux/amd64 wheel for Python 3.11 (pip's resolver, "
        "`--only-binary=:all:`)")
def test_every_dependency_installs_from_a_linux_amd64_wheel(tmp_path: Path) -> None:
    # The build stage's `pip install --only-binary=:all: '.[extras]'`, resolved (not
    # installed) for the image's platform and Python: a dependency without a wheel there
    # fails the resolution.
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
         *(f"--platform={p}" for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64",
                                        "manylinux2014_x86_64")),
         "--target", str(tmp_path / "target"), "--report", str(report),
         f"{REPO}[{','.join(image_extras())}]"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    installed = {item["metadata"]["name"].lower(): item["download_info"]["url"]
                 for item in json.loads(report.read_text())["install"]}
    for name in ("confluent-kafka", "faust-streaming", "duckdb", "fastavro", "orjson"):
        assert installed[name].endswith(".whl"), (name, installed[name])


COMMANDS = image_commands()
PENDING: dict[str, str] = {
    # A command the manifests run before it exists gets a strict xfail here, with its reason
    # (strict: the test fails as soon as the command exists, so the mark cannot outlive it).
}


def _cases() -> list[object]:
    cases: list[object] = []
    for where, args in sorted(COMMANDS.items()):
        reason = PENDING.get(args[0])
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        cases.append(pytest.param(args, id=where, marks=marks))
    return cases


def test_the_deployments_run_worker_sinks_and_serve() -> None:
    commands = {tuple(a for a in args if not a.startswith("-"))[:2]
                for args in COMMANDS.values()}
    assert ("worker",) in {c[:1] for c in commands}
    assert ("sink", "langfuse") in commands
    assert ("serve",) in {c[:1] for c in commands}


@claims("the commands the manifests and compose run", "run",
        "`python -m streams <args> --help` for each (`worker`, `sink langfuse`, `sink duckdb`, "
        "`serve`, `calibration follow`), with the options they pass")
@pytest.mark.parametrize("args", _cases())
def test_each_command_the_deployments_run_exists_with_its_options(args: list[str]) -> None:
    # The options go before --help, so an option the CLI does not have fails the parse.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "streams", *args, "--help"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Usage:" in done.stdout


def test_an_unknown_command_or_option_fails_the_check() -> None:
    # The check above can fail: a misspelt option, and a command that does not exist.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for args in (["worker", "--cursr", "x"], ["sink", "nowhere"]):
        done = subprocess.run([sys.executable, "-m", "streams", *args, "--help"], env=env,
                              capture_output=True, text=True, timeout=60, cwd=REPO)
        assert done.returncode != 0, args
