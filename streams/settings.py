"""Every setting the project reads, declared once: its environment variable, type, default
and meaning.

`Settings(...)` takes the values as keywords; `Settings.from_env(**overrides)` reads the
environment, then applies `overrides`. Either way the values are checked at once, and a bad
one raises `ConfigError` naming the variable and what it allows, so a misconfigured process
fails when it starts, not at its first call to the broker. `settings.to_env()` gives the
variables that reproduce the settings in a child process; `markdown_table()` is the table in
docs/running.md (a test keeps the two equal).

This module imports no Kafka client: `import streams` may load it.
"""

from __future__ import annotations

import json
import math
import os
import typing
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streams.core.errors import ConfigError, ValidationFailed
from streams.core.tenancy import PREFIX_PATTERN

if TYPE_CHECKING:
    from streams.core.judges import ChatModel
    from streams.core.measures.calibration import CalibrationPolicy
    from streams.core.measures.costs import ModelPrice

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_REGISTRY",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "Settings",
    "Var",
    "declared",
    "markdown_table",
]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_REGISTRY = "http://127.0.0.1:8081/apis/ccompat/v7"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# The mechanisms every client here speaks with a user name and password: librdkafka and
# aiokafka (Faust) both implement these three.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class Var:
    """The declaration of one setting: its variable, meaning, and what it allows."""

    env: str
    doc: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    positive: bool = False
    secret: bool = False
    path: bool = False
    unit: str | None = None
    """What the table calls its type when not its Python type's name (a float is seconds
    unless it says otherwise)."""


def _setting(default: Any, env: str, doc: str, *, choices: tuple[str, ...] = (),
             minimum: float | None = None, positive: bool = False, secret: bool = False,
             path: bool = False, unit: str | None = None) -> Any:
    var = Var(env, doc, choices, minimum, positive, secret, path, unit)
    return field(default=default, repr=not secret, metadata={"var": var})


@dataclass(frozen=True)
class Settings:
    """Where the broker and registry are, how to reach them, and the pipeline's knobs.

    Each field is declared with its environment variable (see docs/running.md, generated
    from these declarations). Values are checked on construction; a bad one raises
    ConfigError.
    """

    # -- where, and how to get in -------------------------------------------------------------
    bootstrap_servers: str = _setting(
        DEFAULT_BOOTSTRAP, "KAFKA_BOOTSTRAP_SERVERS", "comma-separated Kafka brokers")
    security_protocol: str = _setting(
        "PLAINTEXT", "KAFKA_SECURITY_PROTOCOL", "how clients talk to the brokers",
        choices=SECURITY_PROTOCOLS)
    sasl_mechanism: str | None = _setting(
        None, "KAFKA_SASL_MECHANISM", "SASL mechanism; required with a SASL_* protocol",
        choices=SASL_MECHANISMS)
    sasl_username: str | None = _setting(None, "KAFKA_SASL_USERNAME", "SASL user name")
    sasl_password: str | None = _setting(None, "KAFKA_SASL_PASSWORD", "SASL password",
                                         secret=True)
    sasl_password_file: str | None = _setting(
        None, "KAFKA_SASL_PASSWORD_FILE", "file holding the SASL password (instead of "
        "KAFKA_SASL_PASSWORD; read whenever a client is built, so a rotated password reaches "
        "new clients without a restart)", path=True)
    ssl_ca_location: str | None = _setting(
        None, "KAFKA_SSL_CA_LOCATION", "PEM file of the CAs that sign the brokers' "
        "certificates (default: the system's)", path=True)
    ssl_certificate_location: str | None = _setting(
        None, "KAFKA_SSL_CERTIFICATE_LOCATION", "PEM client certificate (mutual TLS)",
        path=True)
    ssl_key_location: str | None = _setting(
        None, "KAFKA_SSL_KEY_LOCATION", "PEM private key of the client certificate",
        path=True)
    ssl_key_password: str | None = _setting(
        None, "KAFKA_SSL_KEY_PASSWORD", "password of the private key", secret=True)
    ssl_check_hostname: bool = _setting(
        True, "KAFKA_SSL_CHECK_HOSTNAME", "check that a broker's certificate names the host "
        "connected to (`false` only for certificates without the right names)")
    kafka_extra: dict[str, str] = field(default_factory=dict, metadata={"var": Var(
        "KAFKA_EXTRA_CONFIG", "JSON object of further librdkafka settings for every "
        "confluent-kafka client (not Faust's), applied last")})
    schema_registry_url: str = _setting(
        DEFAULT_REGISTRY, "SCHEMA_REGISTRY_URL", "any Confluent-compatible registry")
    schema_registry_username: str | None = _setting(
        None, "SCHEMA_REGISTRY_USERNAME", "registry basic-auth user")
    schema_registry_password: str | None = _setting(
        None, "SCHEMA_REGISTRY_PASSWORD", "registry basic-auth password", secret=True)
    schema_registry_ca_location: str | None = _setting(
        None, "SCHEMA_REGISTRY_CA_LOCATION", "PEM file of the CAs that sign an https "
        "registry's certificate (default: the system's)", path=True)
    # -- topics -----------------------------------------------------------------------------
    topic_prefix: str = _setting("fs", "STREAMS_TOPIC_PREFIX",
                                 "first part of every topic name")
    partitions: int = _setting(3, "STREAMS_PARTITIONS", "partitions of new tenant topics",
                               minimum=1)
    replication_factor: int = _setting(
        1, "STREAMS_REPLICATION_FACTOR", "replicas of new tenant topics; creating them "
        "refuses more replicas than the cluster has brokers", minimum=1)
    min_insync_replicas: int = _setting(
        1, "STREAMS_MIN_INSYNC_REPLICAS", "min.insync.replicas of new tenant topics: replicas "
        "that must have a write before it is acknowledged (at most "
        "STREAMS_REPLICATION_FACTOR)", minimum=1)
    # -- the worker ---------------------------------------------------------------------------
    discovery_interval: float = _setting(
        1.0, "STREAMS_DISCOVERY_INTERVAL", "seconds between a worker's looks for new tenants",
        positive=True)
    resubscribe_delay: float = _setting(
        0.5, "STREAMS_RESUBSCRIBE_DELAY", "seconds Faust waits before resubscribing to "
        "new topics (its own default: 45)", minimum=0)
    mirror_batch_size: int = _setting(1000, "STREAMS_MIRROR_BATCH_SIZE",
                                      "events per batch of the feedback mirror", minimum=1)
    reactor_batch_size: int = _setting(
        200, "STREAMS_REACTOR_BATCH_SIZE", "events per batch of the rules reactor and the "
        "decider", minimum=1)
    batch_within: float = _setting(
        0.05, "STREAMS_BATCH_WITHIN", "seconds an agent waits to fill a batch", positive=True)
    session_timeout: float = _setting(
        10.0, "STREAMS_SESSION_TIMEOUT", "seconds without heartbeats before a consumer's "
        "partitions move to another", positive=True)
    heartbeat_interval: float = _setting(
        1.0, "STREAMS_HEARTBEAT_INTERVAL", "seconds between a consumer's heartbeats",
        positive=True)
    commit_interval: float = _setting(
        1.0, "STREAMS_COMMIT_INTERVAL", "seconds between a worker's commits of acked "
        "offsets (with exactly_once: the longest a transaction stays open, so what a "
        "read_committed reader waits for a score at most)", positive=True)
    commit_when_caught_up: bool = _setting(
        True, "STREAMS_COMMIT_WHEN_CAUGHT_UP", "whether an exactly_once loop also commits its "
        "transaction as soon as it has read everything there is to read (a light stream's "
        "outputs reach read_committed readers one commit after they are produced, not up "
        "to STREAMS_COMMIT_INTERVAL later; the cost is more, smaller transactions while the "
        "stream is light); a loop behind its input commits every 10 batches or "
        "STREAMS_COMMIT_INTERVAL either way")
    metadata_refresh_interval: float = _setting(
        1.0, "STREAMS_METADATA_REFRESH_INTERVAL", "seconds between clients' metadata "
        "refreshes (how soon a regex subscription sees a new tenant, and a producer a "
        "partition's leader back after a broker restart)",
        positive=True)
    gc_freeze: bool = _setting(
        True, "STREAMS_GC_FREEZE", "whether a long-lived process (worker, serve, sink) freezes "
        "what its start-up made once it has started (`gc.freeze`): Python's full garbage "
        "collections then walk only what was made since, so they no longer stall a request "
        "for tens of milliseconds (docs/operations.md)")
    action_timeout: float = _setting(300.0, "STREAMS_ACTION_TIMEOUT",
                                     "seconds one attempt of a rule's action may take",
                                     positive=True)
    # 128, not 32: a judged run mostly waits (index reads, shared catch-ups, the model), and
    # a reactor batch holds about 100 runs; docs/rules.md#evaluators has the measurement.
    max_concurrent_runs: int = _setting(128, "STREAMS_MAX_CONCURRENT_RUNS",
                                        "runs a worker executes at once (their model "
                                        "calls are bounded apart: STREAMS_LLM_MAX_IN_FLIGHT)",
                                        minimum=1)
    replay_timeout: float = _setting(
        5.0, "STREAMS_REPLAY_TIMEOUT", "seconds the decider waits for the next record "
        "while rebuilding its state, before it starts over", positive=True)
    # -- producing and admin ------------------------------------------------------------------
    delivery_max_backoff: float = _setting(
        5.0, "STREAMS_DELIVERY_MAX_BACKOFF", "longest pause, in seconds, between retries of "
        "records that were not delivered", positive=True)
    flush_timeout: float = _setting(
        30.0, "STREAMS_FLUSH_TIMEOUT", "seconds to wait for the broker to acknowledge a "
        "write or a batch before retrying or failing", positive=True)
    max_record_bytes: int = _setting(
        900_000, "STREAMS_MAX_RECORD_BYTES", "largest encoded event a client appends, in "
        "bytes; keep it under the broker's message.max.bytes (1048588 by default)",
        minimum=1024)
    feedback_timeout: float = _setting(
        30.0, "STREAMS_FEEDBACK_TIMEOUT", "seconds give_feedback and append may take in all "
        "(index look-up, schema registry, delivery) before they raise", positive=True)
    stream_buffer: int = _setting(
        1000, "STREAMS_STREAM_BUFFER", "events a WebSocket subscription delivers ahead of the "
        "client's acks; when it is full the server waits for acks", minimum=1)
    stream_slow_timeout: float = _setting(
        10.0, "STREAMS_STREAM_SLOW_TIMEOUT", "seconds a WebSocket subscriber may leave its "
        "buffer full (or a frame unsent) before it is disconnected as too slow", positive=True)
    stream_compression: bool = _setting(
        False, "STREAMS_STREAM_COMPRESSION", "whether `streams serve` offers WebSocket "
        "clients per-message compression (permessage-deflate); off by default: frames are "
        "small JSON, and compressing them cost the server about 4% of its CPU, and the client as "
        "much (docs/api.md); turn it on for clients on slow links that read long subscriptions")
    mcp_key: str = _setting(
        "", "STREAMS_MCP_KEY", "the API key `streams mcp` (MCP over stdio) acts with: its "
        "tenant, actor and capabilities", secret=True)
    index_partitions: int = _setting(
        32, "STREAMS_INDEX_PARTITIONS", "partitions of a tenant's compacted index topic; a "
        "look-up reads one of them", minimum=1)
    worker_index: bool = _setting(
        True, "STREAMS_WORKER_INDEX", "whether a worker running rules writes the index "
        "entries of every event its rules loop reads and advances the index cursors (so "
        "look-ups never catch up on what workers wrote)")
    index_catch_up_limit: int = _setting(
        200_000, "STREAMS_INDEX_CATCH_UP_LIMIT", "most unindexed events a look-up (give_feedback, "
        "a run record) indexes itself before answering; past it the look-up fails at once "
        "saying to run `streams index build --tenant <tenant>` (0: no limit)", minimum=0)
    state_dir: str = _setting(
        "", "STREAMS_STATE_DIR", "directory of this process's local state (rule state "
        "stores, materialized views), rebuilt from Kafka when missing or corrupt (default: "
        "$XDG_STATE_HOME/feedback-streams, or ~/.local/state/feedback-streams)")
    rule_state_grace: float = _setting(
        3600.0, "STREAMS_RULE_STATE_GRACE", "seconds of event time a stateful rule's match may "
        "arrive late: a key's count entries and rate windows older than its newest match's "
        "time minus this are forgotten, so rule state holds current windows, not history",
        positive=True)
    processing_guarantee: str = _setting(
        "exactly_once", "STREAMS_PROCESSING_GUARANTEE", "how a worker's consume-transform-"
        "produce loops commit: exactly_once (each commit interval's outputs and input offsets "
        "in one Kafka transaction; read downstream with isolation.level=read_committed) or "
        "at_least_once (outputs flushed, then offsets committed; repeats after a crash carry "
        "the same ids; for a broker without transactions)",
        choices=("exactly_once", "at_least_once"))
    transaction_timeout: float = _setting(
        10.0, "STREAMS_TRANSACTION_TIMEOUT", "seconds an exactly-once loop's open transaction "
        "may last before the broker aborts it (transaction.timeout.ms): how long a killed or "
        "paused worker's partitions wait before their new owner redoes its uncommitted work",
        positive=True)
    admin_timeout: float = _setting(
        15.0, "STREAMS_ADMIN_TIMEOUT", "seconds an admin or metadata call (create or list "
        "topics, read or commit offsets) may take before it is counted as an outage", positive=True)
    outage_limit: float = _setting(
        600.0, "STREAMS_OUTAGE_LIMIT", "seconds a sink runner or a worker's loops wait out an "
        "unreachable broker or schema registry (retrying commits and schema lookups) "
        "before the process gives up and exits", positive=True)
    consumer_stall_timeout: float = _setting(
        60.0, "STREAMS_CONSUMER_STALL_TIMEOUT", "seconds a worker loop's consumer may go "
        "without handing on records that wait on its partitions (or without rejoining its "
        "group after losing them, or failing to read its committed offsets while the broker "
        "answers) before the loop replaces it with a new one (librdkafka #4916: a consumer "
        "that stops fetching after a broker restart)", positive=True)
    # -- metrics and health -----------------------------------------------------------------
    metrics: str = _setting(
        "prometheus", "STREAMS_METRICS", "where a worker's or sink runner's metrics go: "
        "`prometheus` (served on /metrics of the health port), `otlp` (pushed by the "
        "OpenTelemetry OTLP/HTTP exporter, configured by the standard OTEL_EXPORTER_OTLP_* "
        "variables) or `none`", choices=("prometheus", "otlp", "none"))
    health_port: int = _setting(
        9464, "STREAMS_HEALTH_PORT", "port where a worker or sink runner serves /healthz, "
        "/readyz and (with STREAMS_METRICS=prometheus) /metrics, on STREAMS_HEALTH_HOST; 0 "
        "serves nothing", minimum=0)
    health_host: str = _setting(
        "127.0.0.1", "STREAMS_HEALTH_HOST", "address the health and metrics endpoints bind "
        "to: loopback by default; 0.0.0.0 in a container, where probes and scrapers come "
        "from outside the pod")
    # -- sinks ------------------------------------------------------------------------------
    sink_batch_size: int = _setting(500, "STREAMS_SINK_BATCH_SIZE",
                                    "scores per batch of a sink runner", minimum=1)
    sink_batch_wait: float = _setting(0.2, "STREAMS_SINK_BATCH_WAIT",
                                      "seconds a sink runner waits to fill a batch",
                                      positive=True)
    sink_in_flight: int = _setting(
        2, "STREAMS_SINK_IN_FLIGHT", "batches a sink runner hands to its sink at once (`record` "
        "calls under way; 1 for a sink that takes one call at a time)", minimum=1)
    sink_max_backoff: float = _setting(
        10.0, "STREAMS_SINK_MAX_BACKOFF", "longest pause, in seconds, between retries of a "
        "failing sink", positive=True)
    langfuse_host: str | None = _setting(
        None, "LANGFUSE_HOST", "Langfuse base URL for `streams sink` (default: the SDK's)")
    langfuse_public_key: str | None = _setting(None, "LANGFUSE_PUBLIC_KEY",
                                               "Langfuse public key for `streams sink`")
    langfuse_secret_key: str | None = _setting(None, "LANGFUSE_SECRET_KEY",
                                               "Langfuse secret key", secret=True)
    langfuse_projects: str | None = _setting(
        None, "STREAMS_LANGFUSE_PROJECTS", "path of a JSON file giving each tenant its own "
        "Langfuse project (`{tenant: {public_key, secret_key, host}}`): `streams sink "
        "langfuse` sends each tenant's scores to its project only, and dead-letters those of "
        "tenants it lacks (instead of LANGFUSE_PUBLIC_KEY/SECRET_KEY for all)")
    langfuse_timeout: float = _setting(30.0, "STREAMS_LANGFUSE_TIMEOUT",
                                       "seconds one Langfuse request may take", positive=True)
    langfuse_concurrency: int = _setting(4, "STREAMS_LANGFUSE_CONCURRENCY",
                                         "Langfuse requests a sink sends at once", minimum=1)
    # -- code to load -----------------------------------------------------------------------
    feedback_modules: tuple[str, ...] = _setting(
        (), "STREAMS_FEEDBACK_MODULES", "comma-separated modules defining feedback types "
        "(`--types`)")
    rule_modules: tuple[str, ...] = _setting(
        (), "STREAMS_RULE_MODULES", "comma-separated modules with RULES, ACTIONS, DEPS "
        "(`--rules`); `streams serve` and `streams mcp` read their RULES to answer `why`")
    proposal_outcome: str = _setting(
        "off", "STREAMS_PROPOSAL_OUTCOME", "`on`: workers also run the shipped proposal-outcome "
        "rule, `streams.core.proposals.rule` (`streams worker --proposal-outcome`)",
        choices=("off", "on"))
    # -- the LLM judges -----------------------------------------------------------------------
    llm_base_url: str | None = _setting(
        None, "STREAMS_LLM_BASE_URL", "OpenAI-compatible API, up to `/chat/completions`")
    llm_model: str | None = _setting(None, "STREAMS_LLM_MODEL", "model the judges ask")
    llm_api_key: str | None = _setting(None, "STREAMS_LLM_API_KEY",
                                       "sent as a Bearer token", secret=True)
    llm_timeout: float = _setting(30.0, "STREAMS_LLM_TIMEOUT",
                                  "seconds one chat request may take", positive=True)
    llm_max_retries: int = _setting(2, "STREAMS_LLM_MAX_RETRIES",
                                    "retries of a failed judgement before handing off",
                                    minimum=0)
    llm_backoff: float = _setting(0.5, "STREAMS_LLM_BACKOFF",
                                  "first pause, in seconds, between judge attempts",
                                  minimum=0)
    llm_max_in_flight: int = _setting(
        32, "STREAMS_LLM_MAX_IN_FLIGHT", "requests a worker has open to one model (base URL, "
        "model and key) at once; a judgement past it waits for one to end (set it to the "
        "provider's limit of requests in flight; runs that reuse a verdict never wait)",
        minimum=1)
    llm_prices: str = _setting(
        "", "STREAMS_LLM_PRICES", "JSON price table of the judges' models in money per "
        'million tokens, `{"<model>": {"prompt": 0.15, "completion": 0.6}}` keyed by the '
        "model a response names: the report's cost per verdict (docs/measures.md)")
    # -- calibration (how far judges agree with people lately) ---------------------------------
    calibration_thresholds: str = _setting(
        "", "STREAMS_CALIBRATION_THRESHOLDS", "JSON object of the lowest agreement with people "
        'each evaluator may fall to before an alarm, `{"<evaluator>": 0.6, '
        '"<evaluator>@<version>": 0.5}`: kappa for categories, Spearman\'s rho for numbers, '
        "over each version's newest pairs (docs/measures.md); an evaluator not named is "
        "measured, never alarmed")
    calibration_window: int = _setting(
        200, "STREAMS_CALIBRATION_WINDOW", "newest (evaluator, person) verdict pairs per "
        "evaluator version and feedback type that online calibration measures", minimum=1)
    calibration_min_pairs: int = _setting(
        30, "STREAMS_CALIBRATION_MIN_PAIRS", "pairs a version needs in its window before its "
        "calibration can raise or clear an alarm", minimum=1)
    calibration_margin: float = _setting(
        0.05, "STREAMS_CALIBRATION_MARGIN", "how far above its threshold an alarmed measure "
        "must come back to clear the alarm (so a measure wavering at the threshold raises "
        "one alarm)", minimum=0, unit="number")
    # -- the service (streams serve) -----------------------------------------------------------
    serve_port: int = _setting(8700, "STREAMS_SERVE_PORT", "port `streams serve` listens on "
                               "(on STREAMS_SERVE_HOST)", minimum=1)
    serve_host: str = _setting(
        "127.0.0.1", "STREAMS_SERVE_HOST", "address `streams serve` binds to: loopback by "
        "default; 0.0.0.0 in a container, behind a Service")
    serve_max_in_flight: int = _setting(
        128, "STREAMS_SERVE_MAX_IN_FLIGHT", "commands one `streams serve` process runs at "
        "once; past it a command is answered 503 unavailable with Retry-After at once, so "
        "admitted commands keep their latency under overload", minimum=1)
    serve_max_lag: float = _setting(
        0.0, "STREAMS_SERVE_MAX_LAG", "seconds `streams serve`'s event loop may run behind "
        "before commands are answered 503 unavailable with Retry-After at once (for when the "
        "loop itself is the bottleneck); 0, the default, turns this off: on a machine other "
        "processes starve, every tick is late and the server would shed all", minimum=0.0)
    command_retention: float = _setting(
        7 * 24 * 3600.0, "STREAMS_COMMAND_RETENTION", "seconds a command id is remembered "
        "(retention of a tenant's command ledger topic, set when the topic is created)",
        positive=True)
    command_partitions: int = _setting(8, "STREAMS_COMMAND_PARTITIONS",
                                       "partitions of a tenant's command ledger topic",
                                       minimum=1)
    command_lease: float = _setting(
        330.0, "STREAMS_COMMAND_LEASE", "seconds after which a command claimed by a process "
        "that never recorded it may be taken over by a retry (above the producer's 300 s "
        "message timeout, so the first attempt's record can no longer land)", positive=True)
    serve_read_timeout: float = _setting(
        30.0, "STREAMS_SERVE_READ_TIMEOUT", "seconds one read (runs, a run, feedback) of "
        "`streams serve` may take; past it the read is answered 503 unavailable (its work, "
        "off the event loop, is abandoned)", positive=True)
    serve_fault: str = _setting(
        "", "STREAMS_SERVE_FAULT", "failure tests only: `kill_after_produce` makes the server "
        "SIGKILL itself after a command's feedback is delivered and before it answers; "
        "`hold_reads` makes every read, off the event loop, write `reads-held` in "
        "STREAMS_STATE_DIR and wait (at most 120 s) until a file `reads-released` is there",
        choices=("", "kill_after_produce", "hold_reads"))
    worker_fault: str = _setting(
        "", "STREAMS_WORKER_FAULT", "failure tests only: `stop_in_transaction` makes an "
        "exactly-once loop SIGSTOP its own process once, right after producing a batch's "
        "outputs into its open transaction, when a file `<loop name>.stop-in-transaction` "
        "is in STREAMS_STATE_DIR (it removes the file first): a pause that surely catches a "
        "transaction open", choices=("", "stop_in_transaction"))

    # -- the registry proxy (streams registry-proxy) -----------------------------------------
    registry_proxy_port: int = _setting(
        8781, "STREAMS_REGISTRY_PROXY_PORT", "port `streams registry-proxy` listens on (on "
        "STREAMS_REGISTRY_PROXY_HOST); it forwards to STREAMS_REGISTRY_UPSTREAM_URL",
        minimum=1)
    registry_upstream_url: str | None = _setting(
        None, "STREAMS_REGISTRY_UPSTREAM_URL", "the registry `streams registry-proxy` "
        "forwards to (unset: SCHEMA_REGISTRY_URL). Set it where every process shares one "
        "configuration: SCHEMA_REGISTRY_URL then names the proxy, for the clients")
    registry_upstream_username: str | None = _setting(
        None, "STREAMS_REGISTRY_UPSTREAM_USERNAME", "basic-auth user the registry proxy "
        "sends STREAMS_REGISTRY_UPSTREAM_URL (with it set, SCHEMA_REGISTRY_USERNAME is what "
        "clients send the proxy and is never forwarded)")
    registry_upstream_password: str | None = _setting(
        None, "STREAMS_REGISTRY_UPSTREAM_PASSWORD", "basic-auth password of "
        "STREAMS_REGISTRY_UPSTREAM_USERNAME", secret=True)
    registry_proxy_host: str = _setting(
        "127.0.0.1", "STREAMS_REGISTRY_PROXY_HOST", "address `streams registry-proxy` binds "
        "to: loopback by default; 0.0.0.0 in a container, behind a Service")
    registry_operators: tuple[str, ...] = _setting(
        (), "STREAMS_REGISTRY_OPERATORS", "comma-separated broker users the registry proxy "
        "lets do anything (the broker's super users, whose rights no ACL shows); the proxy's "
        "own KAFKA_SASL_USERNAME always may")
    registry_auth_ttl: float = _setting(
        60.0, "STREAMS_REGISTRY_AUTH_TTL", "seconds the registry proxy trusts a checked "
        "password and a principal's ACLs before asking the broker again (a rotated password "
        "or a revoked ACL takes effect within it)", positive=True)
    # -- traces -------------------------------------------------------------------------------
    otlp_traces_endpoint: str | None = _setting(
        None, "STREAMS_OTLP_TRACES_ENDPOINT", "OTLP/HTTP traces URL (e.g. "
        "`http://127.0.0.1:4318/v1/traces`) workers and sinks send spans to; unset: none "
        "(docs/traces.md)")

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, _checked(f, getattr(self, f.name)))
        self._check_together()

    def _check_together(self) -> None:
        """Checks that involve several settings."""
        protocol = self.security_protocol
        sasl = protocol.startswith("SASL_")
        if self.sasl_password and self.sasl_password_file:
            raise ConfigError("KAFKA_SASL_PASSWORD and KAFKA_SASL_PASSWORD_FILE both set: "
                              "set one of them")
        if sasl:
            missing = [_var(n).env for n in ("sasl_mechanism", "sasl_username")
                       if not getattr(self, n)]
            if not (self.sasl_password or self.sasl_password_file):
                missing.append("KAFKA_SASL_PASSWORD (or KAFKA_SASL_PASSWORD_FILE)")
            if missing:
                raise ConfigError(f"KAFKA_SECURITY_PROTOCOL={protocol} needs "
                                  f"{', '.join(missing)}")
        else:
            given = [_var(n).env for n in ("sasl_mechanism", "sasl_username", "sasl_password",
                                           "sasl_password_file")
                     if getattr(self, n)]
            if given:
                raise ConfigError(f"{', '.join(given)} set but KAFKA_SECURITY_PROTOCOL is "
                                  f"{protocol}: use SASL_PLAINTEXT or SASL_SSL, or unset them")
        if protocol not in ("SSL", "SASL_SSL"):
            given = [_var(n).env for n in ("ssl_ca_location", "ssl_certificate_location",
                                           "ssl_key_location", "ssl_key_password")
                     if getattr(self, n)]
            if given:
                raise ConfigError(f"{', '.join(given)} set but KAFKA_SECURITY_PROTOCOL is "
                                  f"{protocol}: use SSL or SASL_SSL, or unset them")
        if bool(self.ssl_certificate_location) != bool(self.ssl_key_location):
            raise ConfigError("KAFKA_SSL_CERTIFICATE_LOCATION and KAFKA_SSL_KEY_LOCATION go "
                              "together: set both for mutual TLS, or neither")
        if bool(self.schema_registry_username) != bool(self.schema_registry_password):
            raise ConfigError("SCHEMA_REGISTRY_USERNAME and SCHEMA_REGISTRY_PASSWORD go "
                              "together: set both for basic auth, or neither")
        if bool(self.registry_upstream_username) != bool(self.registry_upstream_password):
            raise ConfigError("STREAMS_REGISTRY_UPSTREAM_USERNAME and "
                              "STREAMS_REGISTRY_UPSTREAM_PASSWORD go together: set both for "
                              "basic auth, or neither")
        if self.min_insync_replicas > self.replication_factor:
            raise ConfigError(f"STREAMS_MIN_INSYNC_REPLICAS ({self.min_insync_replicas}) is "
                              f"more than STREAMS_REPLICATION_FACTOR "
                              f"({self.replication_factor}): no write could be acknowledged; "
                              f"lower it or add replicas")
        if not PREFIX_PATTERN.match(self.topic_prefix):
            raise ConfigError(f"STREAMS_TOPIC_PREFIX must match {PREFIX_PATTERN.pattern}, "
                              f"got {self.topic_prefix!r}")
        for name in ("schema_registry_url", "llm_base_url", "langfuse_host",
                     "otlp_traces_endpoint"):
            url = getattr(self, name)
            if url and not url.startswith(("http://", "https://")):
                raise ConfigError(f"{_var(name).env} must be an http(s) URL, got {url!r}")
        if self.llm_prices:
            self.llm_price_table()  # refused here, at start, naming the model and field
        self.calibration_policy()  # refused here, at start, naming the entry
        if self.heartbeat_interval >= self.session_timeout:
            raise ConfigError("STREAMS_HEARTBEAT_INTERVAL must be less than "
                              f"STREAMS_SESSION_TIMEOUT ({self.heartbeat_interval:g} >= "
                              f"{self.session_timeout:g})")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, /,
                 **overrides: Any) -> Settings:
        """Settings from the environment (or `environ`), then `overrides` (field names).

        An unset or empty variable means the default. A bad value raises ConfigError naming
        the variable; a variable that is overridden is not read.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in overrides:
                continue
            text = env.get(_var(f.name).env)
            if text is not None and text.strip() != "":
                values[f.name] = _parse(f, text.strip())
        values.update(overrides)
        return cls(**values)

    def to_env(self) -> dict[str, str]:
        """The environment variables that reproduce these settings, every one of them (an
        empty value means the default), so a child process sees exactly these settings
        whatever its parent's environment says."""
        return {_var(f.name).env: _format(getattr(self, f.name)) for f in fields(self)}

    def child_env(self, base: Mapping[str, str] | None = None,
                  **extra: str) -> dict[str, str]:
        """The environment of a child process (`python -m streams ...`) that runs with these
        settings: `base` (default: this process's environment), then `to_env()`, then
        `extra` variables."""
        return {**(os.environ if base is None else base), **self.to_env(), **extra}

    def replace(self, **changes: Any) -> Settings:
        """A copy with some fields changed (checked like any Settings)."""
        return type(self)(**{**self.__dict__, **changes})

    def behind_registry_proxy(self) -> Settings:
        """The settings `streams registry-proxy` runs on: the registry is
        STREAMS_REGISTRY_UPSTREAM_URL with its credentials when that is set (the clients'
        SCHEMA_REGISTRY_URL and credentials are the proxy's own and are never forwarded),
        else these settings unchanged."""
        if not self.registry_upstream_url:
            return self
        return self.replace(schema_registry_url=self.registry_upstream_url,
                            schema_registry_username=self.registry_upstream_username,
                            schema_registry_password=self.registry_upstream_password)

    def llm_price_table(self) -> dict[str, ModelPrice]:
        """The judges' models' prices from STREAMS_LLM_PRICES ({} when unset); ConfigError
        naming the model and field that is wrong."""
        from streams.core.measures.costs import parse_prices

        if not self.llm_prices:
            return {}
        try:
            return parse_prices(self.llm_prices)
        except ValidationFailed as exc:
            raise ConfigError(f"STREAMS_LLM_PRICES: {exc}") from exc

    def calibration_policy(self) -> CalibrationPolicy:
        """Online calibration's policy from the STREAMS_CALIBRATION_* settings; ConfigError
        naming the variable and the entry that is wrong."""
        from streams.core.measures.calibration import CalibrationPolicy, parse_thresholds

        try:
            thresholds = parse_thresholds(self.calibration_thresholds)
        except ValidationFailed as exc:
            raise ConfigError(f"STREAMS_CALIBRATION_THRESHOLDS: {exc}") from exc
        try:
            return CalibrationPolicy(thresholds=thresholds, window=self.calibration_window,
                                     min_pairs=self.calibration_min_pairs,
                                     margin=self.calibration_margin)
        except ValidationFailed as exc:
            raise ConfigError(f"STREAMS_CALIBRATION_MIN_PAIRS / _WINDOW / _MARGIN: {exc}") \
                from exc

    def chat_model(self, **overrides: Any) -> ChatModel:
        """The LLM judges' ChatModel from the STREAMS_LLM_* settings; `overrides` win (field
        names of ChatModel). A missing base URL or model raises ConfigError naming it."""
        from streams.core.judges import ChatModel

        values: dict[str, Any] = {"base_url": self.llm_base_url, "model": self.llm_model,
                                  "api_key": self.llm_api_key, "timeout": self.llm_timeout,
                                  "max_retries": self.llm_max_retries,
                                  "backoff": self.llm_backoff,
                                  "max_in_flight": self.llm_max_in_flight}
        values.update(overrides)
        for key, name in (("base_url", "llm_base_url"), ("model", "llm_model")):
            if not values[key]:
                raise ConfigError(f"{_var(name).env} is not set: the LLM judges need it")
        return ChatModel(**values)

    def state_path(self, *parts: str) -> Path:
        """A path under this process's state directory (`state_dir`, or the XDG default);
        creates nothing."""
        root = Path(self.state_dir) if self.state_dir else Path(
            os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state",
        ) / "feedback-streams"
        return root.joinpath(*parts)

    def sasl_secret(self) -> str | None:
        """The SASL password: KAFKA_SASL_PASSWORD, or the first line of
        KAFKA_SASL_PASSWORD_FILE read now (so each new client gets the current one)."""
        if self.sasl_password_file:
            try:
                text = Path(self.sasl_password_file).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"KAFKA_SASL_PASSWORD_FILE names {self.sasl_password_file!r}"
                                  f", which cannot be read: {exc}") from exc
            secret = text.strip("\r\n")
            if not secret:
                raise ConfigError(f"KAFKA_SASL_PASSWORD_FILE {self.sasl_password_file!r} is "
                                  "empty: write the password in it")
            return secret
        return self.sasl_password

    def shown(self) -> dict[str, str]:
        """Each variable and its value as text, secrets masked (for `streams settings`)."""
        return {var.env: ("***" if var.secret and value else _format(value))
                for var, value in ((_var(f.name), getattr(self, f.name))
                                   for f in fields(self))}


# -- the declaration table ------------------------------------------------------------------


@cache
def _types() -> dict[str, Any]:
    return typing.get_type_hints(Settings)


def _var(name: str) -> Var:
    return _fields()[name].metadata["var"]  # type: ignore[no-any-return]


@cache
def _fields() -> dict[str, Field[Any]]:
    return {f.name: f for f in fields(Settings)}


def declared() -> Iterator[tuple[str, Var, str, Any]]:
    """(field name, declaration, type name, default) of every setting, in order."""
    for f in fields(Settings):
        default = f.default_factory() if f.default is MISSING and \
            f.default_factory is not MISSING else f.default
        var = f.metadata["var"]
        yield f.name, var, var.unit or _type_name(_types()[f.name]), default


def _type_name(tp: Any) -> str:
    names = {bool: "boolean", str: "text", int: "integer", float: "seconds",
             tuple[str, ...]: "list",
             dict[str, str]: "JSON object", str | None: "text"}
    return names.get(tp, str(tp))


def _allowed(var: Var, tp: Any) -> str:
    """What a setting allows, in words (for error messages)."""
    if var.choices:
        return f"one of {', '.join(var.choices)}"
    kind = {int: "an integer", float: "a number"}.get(tp, "text")
    if var.positive:
        return f"{kind} > 0"
    if var.minimum is not None:
        return f"{kind} >= {var.minimum:g}"
    return kind


def _parse(f: Field[Any], text: str) -> Any:
    """A variable's text as the field's type; ConfigError naming the variable if it is not."""
    var, tp = f.metadata["var"], _types()[f.name]
    if tp is bool:
        lowered = text.lower()
        if lowered not in _BOOLEANS:
            raise ConfigError(f"{var.env} must be true or false, got {text!r}")
        return _BOOLEANS[lowered]
    try:
        if tp is int:
            return int(text)
        if tp is float:
            return float(text)
        if tp == tuple[str, ...]:
            return tuple(part.strip() for part in text.split(",") if part.strip())
        if tp == dict[str, str]:
            loaded = json.loads(text)
            if not isinstance(loaded, dict):
                raise ValueError("not a JSON object")
            return {str(k): _librdkafka_text(v) for k, v in loaded.items()}
    except ValueError as exc:
        what = "a JSON object, e.g. {\"client.id\": \"me\"}" if tp == dict[str, str] \
            else _allowed(var, tp)
        raise ConfigError(f"{var.env} must be {what}, got {text!r}") from exc
    return text


_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _librdkafka_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _checked(f: Field[Any], value: Any) -> Any:
    """A field's value checked against its declaration (and normalised: lists to tuples,
    ints to floats, mappings copied); ConfigError naming the variable if it breaks it."""
    var, tp = f.metadata["var"], _types()[f.name]
    bad = ConfigError(f"{var.env} ({f.name}) must be {_allowed(var, tp)}, got {value!r}")
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{var.env} ({f.name}) must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            raise bad
        value = float(value)
    elif tp == tuple[str, ...]:
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{var.env} ({f.name}) must be a list of module names, "
                              f"got {value!r}")
        value = tuple(value)
    elif tp == dict[str, str]:
        if not isinstance(value, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise ConfigError(f"{var.env} ({f.name}) must map setting names to text, "
                              f"got {value!r}")
        value = dict(value)
    elif value is not None and not isinstance(value, str):
        raise ConfigError(f"{var.env} ({f.name}) must be text, got {value!r}")
    if value == "" and tp == str | None:
        value = None
    if value is None:
        if tp != str | None:
            raise ConfigError(f"{var.env} ({f.name}) must be set")
        return value
    if var.choices and value not in var.choices:
        raise bad
    if isinstance(value, int | float):
        if var.positive and not value > 0:
            raise bad
        if var.minimum is not None and value < var.minimum:
            raise bad
    if var.path and not Path(value).is_file():
        raise ConfigError(f"{var.env} names {value!r}, which is not a readable file")
    return value


def _format(value: Any) -> str:
    """A value as its variable's text (what `_parse` reads back)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True) if value else ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def markdown_table() -> str:
    """The configuration table of docs/running.md, generated from the declarations."""
    lines = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    for _name, var, type_name, default in declared():
        shown = _format(default)
        cell = f"`{shown}`" if shown else "(none)"
        doc = var.doc
        if var.choices:
            doc += f"; one of {', '.join(f'`{c}`' for c in var.choices)}"
        if var.secret:
            doc += " (secret: never printed)"
        lines.append(f"| `{var.env}` | {type_name} | {cell} | {doc.replace('|', '/')} |")
    return "\n".join(lines) + "\n"
