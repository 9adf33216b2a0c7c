"""The API key store: keys as hashes in a compacted topic every server process follows.

Topic `<prefix>._keys` (one partition, compacted: the newest record of each key id is kept).
`create` writes a key (its secret's SHA-256, tenant, actor, capabilities) and returns the
token once; `revoke` writes the key again with its revocation time. Every process follows
the topic (streams.adapters.kafka.tail.TopicTail), so a revocation reaches every server
process as soon as its tail reads the record: within the tail's fetch wait (milliseconds) on
a reachable broker, which is what the 10 s guarantee of docs/api.md rests on.

    keys = KeyStore(runtime)                       # on a Runtime's producer and admin client
    keys.start()                                   # blocking: follows the topic
    key, token = keys.create("acme", UserActor(id="ada"), {"give_feedback", "read"})
    keys.authorize(token, "acme", "give_feedback")   # the ApiKey, or Unauthorized/Forbidden
"""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import KafkaException, Message

from streams.core.actors import AnyActor
from streams.core.errors import KafkaUnavailable, NotFound
from streams.core.keys import ApiKey, authorize, check_capabilities, new_key, parse_token
from streams.core.tenancy import check_tenant, keys_topic
from streams.runtime.root import Runtime

__all__ = ["KeyStore"]


class KeyStore:
    """Creates, lists, revokes and checks API keys; thread-safe.

    `start()` (blocking) creates the topic if needed and follows it; every method but
    `start` and `close` answers from memory or writes one record.
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.topic = keys_topic(runtime.settings.topic_prefix)
        self._started = False
        self._keys: dict[str, ApiKey] = {}
        self._lock = threading.Lock()
        self._tail = runtime.tail(self.topic, self._apply)

    def _apply(self, _partition: int, _offset: int, key: bytes, value: bytes | None) -> None:
        with self._lock:
            if value is None:
                self._keys.pop(key.decode(), None)
                return
            found = ApiKey.decode(value)
            if found is not None:
                self._keys[found.key_id] = found

    def start(self) -> None:
        """Create the topic if missing, follow it, and return once it is read to its end."""
        self.runtime.admin.ensure_compacted_topic(self.topic, 1)
        self._tail.start()
        self._tail.sync()
        self._started = True

    def _write(self, key: ApiKey) -> None:
        if not self._started:
            raise RuntimeError("start() the key store first")
        producer = self.runtime.producer
        failure: list[Any] = []

        def delivered(err: Any, _msg: Message) -> None:
            if err is not None:
                failure.append(err)

        try:
            producer.produce(self.topic, key=key.key_id.encode(), value=key.encode(),
                             on_delivery=delivered)
            left = producer.flush(self.settings.admin_timeout)
        except KafkaException as exc:
            raise KafkaUnavailable(f"could not write to {self.topic}: {exc}") from exc
        if left or failure:
            raise KafkaUnavailable(f"writing to {self.topic} failed ({failure or 'timeout'}); "
                                   "check that the brokers are up")
        self._apply(0, 0, key.key_id.encode(), key.encode())

    def create(self, tenant: str, actor: AnyActor, capabilities: set[str] | frozenset[str],
               note: str = "") -> tuple[ApiKey, str]:
        """A new key of `tenant` acting as `actor`, and its token (shown only now)."""
        check_tenant(tenant)
        key, token = new_key(tenant, actor, check_capabilities(frozenset(capabilities)),
                             int(time.time() * 1000), note)
        self._write(key)
        return key, token

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key (every process refuses it once its tail reads this); NotFound if there
        is no such key. Revoking twice keeps the first time."""
        with self._lock:
            key = self._keys.get(key_id)
        if key is None:
            raise NotFound(f"no API key {key_id!r}: see `streams keys list`")
        if key.revoked:
            return key
        revoked = key.model_copy(update={"revoked_ms": int(time.time() * 1000)})
        self._write(revoked)
        return revoked

    def list(self, tenant: str | None = None) -> list[ApiKey]:
        """The keys (of `tenant`, when given), oldest first; revoked ones included."""
        with self._lock:
            keys = list(self._keys.values())
        return sorted((k for k in keys if tenant is None or k.tenant == tenant),
                      key=lambda k: (k.created_ms, k.key_id))

    def get(self, key_id: str) -> ApiKey | None:
        """A key by id."""
        with self._lock:
            return self._keys.get(key_id)

    def authorize(self, token: str, tenant: str, capability: str) -> ApiKey:
        """The key of a bearer token, if it may use `capability` on `tenant`; Unauthorized
        (unknown, malformed or revoked) or Forbidden (another tenant, missing capability)."""
        key_id, secret = parse_token(token)
        return authorize(self.get(key_id), secret, tenant, capability)

    def sync(self) -> None:
        """Block until every key written before the call is known here (the CLI's list)."""
        self._tail.sync()

    def close(self) -> None:
        """Stop following (every write was flushed when made; the runtime owns the
        producer)."""
        self._tail.close()
