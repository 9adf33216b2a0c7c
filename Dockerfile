# syntax=docker/dockerfile:1
# One image for every process of feedback-streams; the command picks which:
#   docker run IMAGE worker --types my_app.feedback
#   docker run IMAGE sink langfuse        (LANGFUSE_* from the environment)
#   docker run IMAGE sink duckdb --path /data/scores.duckdb
#   docker run IMAGE serve                (STREAMS_SERVE_PORT, default 8000)
#   docker run IMAGE schemas register     (the committed schemas in /app/schemas)
# Every setting is an environment variable (docs/running.md). The project's machines have no
# Docker engine: CI builds this file with podman and runs the image (deploy/image.sh,
# tests/deploy/test_container.py); tests/deploy/test_image.py checks its shape, that every
# dependency has a linux/amd64 wheel and that every command the manifests and compose file
# run exists in the CLI.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# -- build: the package and its dependencies into a virtualenv ---------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/venv
# Dependencies first, from pyproject.toml alone, so a change to the code reuses this layer.
# The extras of the image's commands: serve (streams serve), duckdb and langfuse (the sinks),
# judges (a worker whose rules call LLM judges); not demo or mcp (stdio is for a local client).
# Every dependency ships binary wheels for linux/amd64 (confluent-kafka bundles librdkafka),
# so no compiler is installed; tests/deploy/test_image.py checks this with pip's resolver.
# Not for arm64: faust-streaming publishes no arm64 wheel, so build with --platform linux/amd64.
COPY pyproject.toml README.md ./
RUN mkdir streams && touch streams/__init__.py \
 && /opt/venv/bin/pip install --only-binary=:all: '.[serve,duckdb,langfuse,judges]' \
 && /opt/venv/bin/pip uninstall -y feedback-streams
COPY streams ./streams
RUN /opt/venv/bin/pip install --no-deps . \
 && /opt/venv/bin/python -m compileall -q /opt/venv/lib

# -- run: the virtualenv, the committed schemas, a user that is not root -------------------------
FROM ${PYTHON_IMAGE}
ARG UID=10001
RUN groupadd --system --gid "${UID}" streams \
 && useradd --system --uid "${UID}" --gid streams --no-create-home --home-dir /app \
      --shell /usr/sbin/nologin streams
COPY --from=build /opt/venv /opt/venv
# /data: where `sink duckdb` keeps its file; a volume mounted there starts out owned by the user.
RUN mkdir /data && chown "${UID}:${UID}" /data
WORKDIR /app
# `streams schemas check | register` read ./schemas by default.
COPY schemas ./schemas
# Bytecode was compiled at build time; the root file system can be read-only. The worker's
# Faust data dir is under $TMPDIR, and every process's local state (views, rule state, the
# index's store: rebuilt from Kafka when missing) under /tmp too: mount an emptyDir at /tmp.
# (The default, under $HOME, is the read-only /app: the API failed its first read there.)
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TMPDIR=/tmp \
    STREAMS_STATE_DIR=/tmp/state
USER ${UID}:${UID}
ENTRYPOINT ["streams"]
CMD ["--help"]
