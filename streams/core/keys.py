"""API keys, in pure code: what a key is bound to, its token format and how it is checked.

A key is bound to one tenant, one actor (a person, an evaluator name@version, an agent) and a
set of capabilities (CAPABILITIES: `give_feedback`, `read`, `manage_queues`). Its token,
shown once when the key is created, is `fsk_<key id>_<secret>`; only the SHA-256 of the
secret is stored (the secret is 256 random bits, so a fast hash cannot be searched). Records
of keys are JSON in a compacted topic every server process reads
(streams.runtime.client.keys.KeyStore).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from streams.core.actors import Actor, AnyActor
from streams.core.errors import Forbidden, Unauthorized, ValidationFailed

__all__ = [
    "CAPABILITIES",
    "ApiKey",
    "authorize",
    "check_capabilities",
    "hash_secret",
    "new_key",
    "parse_token",
]

CAPABILITIES: Final = frozenset({"give_feedback", "read", "manage_queues"})
"""What a key may do: give feedback (commands), read (runs, feedback, types, queues),
manage queues (install and archive annotation queues)."""

_TOKEN: Final = re.compile(r"fsk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")


class ApiKey(BaseModel):
    """A stored key: no secret, only its hash."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    tenant: str
    actor: Actor
    capabilities: frozenset[str]
    secret_sha256: str
    created_ms: int
    revoked_ms: int | None = None
    note: str = ""

    @property
    def revoked(self) -> bool:
        """Whether the key was revoked."""
        return self.revoked_ms is not None

    def encode(self) -> bytes:
        """The record value."""
        return self.model_dump_json().encode()

    @classmethod
    def decode(cls, value: bytes) -> ApiKey | None:
        """The key of a record value; None for one this version cannot read."""
        try:
            return cls.model_validate_json(value)
        except (ValidationError, ValidationFailed):
            return None


def hash_secret(secret: str) -> str:
    """The stored form of a key's secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


def check_capabilities(capabilities: frozenset[str] | set[str]) -> frozenset[str]:
    """The capabilities, if each is known; ValidationFailed naming the known ones otherwise."""
    unknown = set(capabilities) - CAPABILITIES
    if unknown or not capabilities:
        raise ValidationFailed(f"unknown or no capabilities {sorted(unknown)}: choose from "
                               f"{sorted(CAPABILITIES)}")
    return frozenset(capabilities)


def new_key(tenant: str, actor: AnyActor, capabilities: frozenset[str], now_ms: int,
            note: str = "") -> tuple[ApiKey, str]:
    """A new key and its token (the only time the secret exists)."""
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    key = ApiKey(key_id=key_id, tenant=tenant, actor=actor,
                 capabilities=check_capabilities(capabilities),
                 secret_sha256=hash_secret(secret), created_ms=now_ms, note=note)
    return key, f"fsk_{key_id}_{secret}"


def parse_token(token: str) -> tuple[str, str]:
    """(key id, secret) of a token; Unauthorized if it is not one."""
    found = _TOKEN.fullmatch(token.strip())
    if found is None:
        raise Unauthorized("malformed API key: send `Authorization: Bearer fsk_<id>_<secret>` "
                           "with a key from `streams keys create`")
    return found.group(1), found.group(2)


def authorize(key: ApiKey | None, secret: str, tenant: str, capability: str) -> ApiKey:
    """The key, if it is known, not revoked, its secret matches, it belongs to `tenant` and has
    `capability`; Unauthorized or Forbidden saying which otherwise."""
    if key is None or not hmac.compare_digest(key.secret_sha256, hash_secret(secret)):
        raise Unauthorized("unknown API key: create one with `streams keys create`")
    if key.revoked:
        raise Unauthorized(f"API key {key.key_id} was revoked: create a new one with "
                           "`streams keys create`")
    if key.tenant != tenant:
        raise Forbidden(f"API key {key.key_id} belongs to another tenant than {tenant!r}: use "
                        f"a key of tenant {tenant!r}")
    if capability not in key.capabilities:
        raise Forbidden(f"API key {key.key_id} lacks the {capability!r} capability (it has "
                        f"{sorted(key.capabilities)}): create a key with it")
    return key
