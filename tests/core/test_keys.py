"""API keys: token format, hashing, and the authorization rules, without a broker."""

from __future__ import annotations

import pytest

from streams.core.actors import EvaluatorActor, UserActor
from streams.core.errors import Forbidden, Unauthorized, ValidationFailed
from streams.core.keys import ApiKey, authorize, hash_secret, new_key, parse_token


def make(tenant: str = "acme", caps: frozenset[str] = frozenset({"give_feedback"}),
         ) -> tuple[ApiKey, str]:
    return new_key(tenant, UserActor(id="ada"), caps, now_ms=1)


def test_a_token_carries_the_key_id_and_only_a_hash_is_stored() -> None:
    key, token = make()
    key_id, secret = parse_token(token)
    assert key_id == key.key_id
    assert key.secret_sha256 == hash_secret(secret)
    assert secret not in key.encode().decode()
    assert ApiKey.decode(key.encode()) == key


def test_authorize_accepts_the_right_tenant_and_capability() -> None:
    key, token = make()
    _id, secret = parse_token(token)
    assert authorize(key, secret, "acme", "give_feedback") == key


@pytest.mark.parametrize("token", ["", "Bearer x", "fsk_zz_abc", "fsk_0123456789abcdef_short"])
def test_malformed_tokens_are_unauthorized(token: str) -> None:
    with pytest.raises(Unauthorized, match="streams keys create"):
        parse_token(token)


def test_unknown_wrong_secret_and_revoked_keys_are_unauthorized() -> None:
    key, token = make()
    _id, secret = parse_token(token)
    with pytest.raises(Unauthorized, match="unknown"):
        authorize(None, secret, "acme", "give_feedback")
    with pytest.raises(Unauthorized, match="unknown"):
        authorize(key, secret[:-1] + ("A" if secret[-1] != "A" else "B"), "acme",
                  "give_feedback")
    with pytest.raises(Unauthorized, match="revoked"):
        authorize(key.model_copy(update={"revoked_ms": 2}), secret, "acme", "give_feedback")


def test_another_tenant_or_a_missing_capability_is_forbidden() -> None:
    key, token = make()
    _id, secret = parse_token(token)
    with pytest.raises(Forbidden, match="another tenant"):
        authorize(key, secret, "globex", "give_feedback")
    with pytest.raises(Forbidden, match="'read'"):
        authorize(key, secret, "acme", "read")


def test_capabilities_are_checked() -> None:
    with pytest.raises(ValidationFailed, match="choose from"):
        new_key("acme", EvaluatorActor(name="judge", version="1"), frozenset({"admin"}), 1)
    with pytest.raises(ValidationFailed):
        new_key("acme", UserActor(id="ada"), frozenset(), 1)
