"""Client configurations from Settings: the one place a Kafka or registry client's settings
are written, so every producer, consumer, admin client, Faust app and registry client gets
the same brokers, security and extra settings.

The runtime's composition root (`streams.runtime.root.Runtime`) builds its clients from
these; adapters that are used on their own (TenantAdmin, EventLog, TopicReader) call them
too. Building a configuration does no network I/O.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError

from streams.core.errors import ConfigError
from streams.settings import Settings

__all__ = [
    "TRANSACTION_RETRY_BACKOFF_MS",
    "admin_config",
    "authentication_failure",
    "client_config",
    "consumer_config",
    "faust_settings",
    "librdkafka_log",
    "producer_config",
    "reader_config",
    "registry_config",
    "security_config",
    "ssl_context",
    "transactional_producer_config",
]


def security_config(settings: Settings) -> dict[str, Any]:
    """librdkafka's security settings: protocol, SASL mechanism and credentials (the password
    file read now), TLS files and hostname verification."""
    config: dict[str, Any] = {"security.protocol": settings.security_protocol}
    if settings.security_protocol.startswith("SASL_"):
        config["sasl.mechanism"] = settings.sasl_mechanism
        config["sasl.username"] = settings.sasl_username
        config["sasl.password"] = settings.sasl_secret()
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        config["ssl.endpoint.identification.algorithm"] = \
            "https" if settings.ssl_check_hostname else "none"
    for key, value in (("ssl.ca.location", settings.ssl_ca_location),
                       ("ssl.certificate.location", settings.ssl_certificate_location),
                       ("ssl.key.location", settings.ssl_key_location),
                       ("ssl.key.password", settings.ssl_key_password)):
        if value:
            config[key] = value
    return config


# The last authentication failure librdkafka reported per (brokers, user, password digest),
# from any client's error callback: a metadata call of a client whose credentials the broker
# refused fails only with a transport error, which alone does not say why.
_AUTH_FAILURES: dict[tuple[str, str, str], str] = {}
_AUTH_LOCK = threading.Lock()
_AUTH_CODES = (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED)


def _credentials_key(settings: Settings, password: str | None) -> tuple[str, str, str]:
    digest = hashlib.sha256((password or "").encode()).hexdigest()
    return settings.bootstrap_servers, settings.sasl_username or "", digest


class _RateLimit(logging.Filter):
    """Lets through one record per (client, kind) every `interval` seconds, noting how many
    were held back: an unreachable broker makes librdkafka repeat the same line every few
    milliseconds, which buried the one line saying what to do."""

    def __init__(self, interval: float = 30.0) -> None:
        super().__init__()
        self.interval = interval
        self._last: dict[tuple[str, str], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        # confluent-kafka logs "%s [%s] %s" with (facility, client name, text); the error
        # callback below logs with a kind and the client's brokers.
        key = tuple(str(a) for a in record.args[:2]) if isinstance(record.args, tuple) \
            and len(record.args) >= 2 else (record.msg, "")
        now = time.monotonic()
        with self._lock:
            last, held = self._last.get((key[0], key[1]), (float("-inf"), 0))
            if now - last < self.interval:
                self._last[(key[0], key[1])] = (last, held + 1)
                return False
            self._last[(key[0], key[1])] = (now, 0)
        if held:
            record.msg = f"{record.msg} ({held} more like it in the last {self.interval:g} s)"
        return True


librdkafka_log = logging.getLogger("streams.librdkafka")
"""Where librdkafka's own log lines and client errors go (every client's `logger` and
`error_cb`), rate-limited per client and kind, instead of librdkafka's own stderr lines."""
librdkafka_log.addFilter(_RateLimit())


def _error_callback(key: tuple[str, str, str] | None, brokers: str,
                    on_error: Callable[[KafkaError], None] | None) -> Any:
    def error_cb(error: KafkaError) -> None:
        if on_error is not None:
            on_error(error)
        if key is not None and error.code() in _AUTH_CODES:
            with _AUTH_LOCK:
                _AUTH_FAILURES[key] = error.str()
        # The client retries; the operation that needs the broker fails with its own error
        # (KafkaUnavailable naming what to check). This line says why, once in a while.
        librdkafka_log.warning("%s [%s] %s; check KAFKA_BOOTSTRAP_SERVERS, or start the stack "
                               "(deploy/stack.sh start)", error.name(), brokers, error.str())
    return error_cb


def authentication_failure(settings: Settings) -> str | None:
    """What the broker said when it last refused these exact credentials (user and current
    password), as seen by any client of this process; None if it never did."""
    if not settings.security_protocol.startswith("SASL_"):
        return None
    try:
        key = _credentials_key(settings, settings.sasl_secret())
    except ConfigError:  # the password file went away: no credentials to speak of
        return None
    with _AUTH_LOCK:
        return _AUTH_FAILURES.get(key)


def client_config(settings: Settings, *, on_error: Callable[[KafkaError], None] | None = None,
                  **extra: Any) -> dict[str, Any]:
    """What every confluent-kafka client shares: brokers and security, then `extra`, then
    the operator's KAFKA_EXTRA_CONFIG (last, so an operator can override anything). librdkafka's
    log lines and client errors go to `librdkafka_log`, rate-limited; with SASL, the error
    callback also remembers authentication failures (`authentication_failure`). `on_error`,
    when given, sees every client error first (a runner counts the broker going away)."""
    security = security_config(settings)
    key = _credentials_key(settings, security["sasl.password"]) \
        if "sasl.password" in security else None
    extra = {"logger": librdkafka_log,
             "error_cb": _error_callback(key, settings.bootstrap_servers, on_error), **extra}
    return {"bootstrap.servers": settings.bootstrap_servers, **security,
            **extra, **settings.kafka_extra}


def producer_config(settings: Settings, **extra: Any) -> dict[str, Any]:
    """An idempotent, fully acknowledged producer: nothing written is lost or doubled by
    the producer's own retries. It refreshes its metadata every `metadata_refresh_interval`
    like the consumers: after a broker restart librdkafka (2.16) can keep a partition's
    leader as -1 ("new leader-1 not found in cache") until the next periodic refresh, five
    minutes by default, and every record for that partition waits that long
    (tests/faults/test_exactly_once_broker.py met it)."""
    return client_config(settings, **{
        "enable.idempotence": True, "acks": "all", "linger.ms": 5, "compression.type": "lz4",
        "topic.metadata.refresh.interval.ms": int(settings.metadata_refresh_interval * 1000),
        **extra})


TRANSACTION_RETRY_BACKOFF_MS = 5
"""The transactional producer's first retry backoff (see transactional_producer_config)."""


def transactional_producer_config(settings: Settings, transactional_id: str,
                                  **extra: Any) -> dict[str, Any]:
    """An exactly-once loop's producer: idempotent, fully acknowledged, with its
    `transactional.id` and a transaction timeout of `transaction_timeout` (how long a dead
    owner's open transaction holds its partitions before the broker aborts it).

    Its first retry comes after 5 ms, not librdkafka's 100: a transaction begun right after
    the last one committed finds the coordinator still writing that one's markers, and the
    offsets it sends are refused once (CONCURRENT_TRANSACTIONS) and retried after the
    backoff, so every transaction took at least 100 ms, capping a loop at ten commits a
    second and adding 100 ms to each score's latency (bench/transaction_cycle.py measures
    it; docs/limitations.md has the figures). Retries still back off exponentially up to
    `retry.backoff.max.ms` (1 s) when the broker is away."""
    return producer_config(settings, **{
        "transactional.id": transactional_id,
        "transaction.timeout.ms": int(settings.transaction_timeout * 1000),
        "retry.backoff.ms": TRANSACTION_RETRY_BACKOFF_MS,
        **extra,
    })


# Every consumer reads committed records only: an exactly-once loop's outputs appear when its
# transaction commits, and an aborted one's never. (librdkafka's default too, spelled out so
# that no client kind depends on a default.) A read-to-end loop stops at the last stable
# offset, not the high watermark: see streams.adapters.kafka.log.reached_end.
_READ_COMMITTED = {"isolation.level": "read_committed"}


def consumer_config(settings: Settings, group: str, **extra: Any) -> dict[str, Any]:
    """A consumer-group member that commits only when told to, starts from the beginning
    when its group has no offsets, reads committed records only, sees new topics within
    `metadata_refresh_interval`, and is declared dead `session_timeout` after it stops
    heartbeating (so its partitions move on quickly)."""
    return client_config(settings, **{
        **_READ_COMMITTED,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "topic.metadata.refresh.interval.ms": int(settings.metadata_refresh_interval * 1000),
        "session.timeout.ms": int(settings.session_timeout * 1000),
        "heartbeat.interval.ms": int(settings.heartbeat_interval * 1000),
        **extra,
    })


def reader_config(settings: Settings, group: str, **extra: Any) -> dict[str, Any]:
    """A consumer that reads assigned partitions, committed records only, and commits
    nothing (librdkafka wants a group id even then; it is never joined)."""
    return client_config(settings, **{**_READ_COMMITTED, "group.id": group,
                                      "enable.auto.commit": False,
                                      "enable.partition.eof": False, **extra})


def admin_config(settings: Settings) -> dict[str, Any]:
    """An admin client."""
    return client_config(settings)


def registry_config(settings: Settings) -> dict[str, Any]:
    """The schema registry client's settings: URL, basic auth and the CA of an https
    registry, when configured."""
    config: dict[str, Any] = {"url": settings.schema_registry_url}
    if settings.schema_registry_username:
        config["basic.auth.user.info"] = \
            f"{settings.schema_registry_username}:{settings.schema_registry_password}"
    if settings.schema_registry_ca_location:
        config["ssl.ca.location"] = settings.schema_registry_ca_location
    return config


def ssl_context(settings: Settings) -> ssl.SSLContext:
    """A TLS context for Faust (aiokafka) from the same CA, certificate and key files and the
    same hostname verification (the certificate itself is always verified)."""
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH,
                                             cafile=settings.ssl_ca_location)
        context.check_hostname = settings.ssl_check_hostname
        if settings.ssl_certificate_location:
            context.load_cert_chain(settings.ssl_certificate_location,
                                    settings.ssl_key_location,
                                    settings.ssl_key_password)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the TLS files of KAFKA_SSL_CA_LOCATION / "
                          f"KAFKA_SSL_CERTIFICATE_LOCATION / KAFKA_SSL_KEY_LOCATION: "
                          f"{exc}") from exc
    return context


def faust_settings(settings: Settings) -> dict[str, Any]:
    """Keyword settings of a faust.App for these brokers and this security: the broker URL
    and `broker_credentials` (SASL, TLS or both), plus the session and heartbeat timing."""
    from faust.auth import SASLCredentials, SSLCredentials

    protocol = settings.security_protocol
    tls = ssl_context(settings) if protocol in ("SSL", "SASL_SSL") else None
    credentials: Any = None
    if protocol.startswith("SASL_"):
        # With a context Faust speaks SASL_SSL, without one SASL_PLAINTEXT.
        credentials = SASLCredentials(username=settings.sasl_username,
                                      password=settings.sasl_secret(),
                                      mechanism=settings.sasl_mechanism, ssl_context=tls)
    elif tls is not None:
        credentials = SSLCredentials(tls)
    return {
        "broker": ";".join(f"kafka://{host.strip()}"
                           for host in settings.bootstrap_servers.split(",")),
        "broker_credentials": credentials,
        "broker_session_timeout": settings.session_timeout,
        "broker_heartbeat_interval": settings.heartbeat_interval,
        "broker_commit_interval": settings.commit_interval,
    }
