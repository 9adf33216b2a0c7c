"""The settings declaration: reading, checking, reproducing in a child, and the doc table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streams.core.errors import ConfigError, StreamsError
from streams.core.judges import ChatModel
from streams.settings import Settings, declared, markdown_table

RUNNING = Path(__file__).resolve().parent.parent / "docs" / "running.md"
SASL = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "ada", "sasl_password": "s3cret"}


def test_every_setting_has_a_distinct_variable_and_a_doc() -> None:
    rows = list(declared())
    variables = [var.env for _n, var, _t, _d in rows]
    assert len(variables) == len(set(variables))
    assert all(var.doc for _n, var, _t, _d in rows)
    # The knobs that used to be constants, and the variables read elsewhere, are declared.
    assert {"STREAMS_SESSION_TIMEOUT", "STREAMS_ACTION_TIMEOUT", "STREAMS_COMMIT_INTERVAL",
            "STREAMS_FEEDBACK_MODULES", "STREAMS_RULE_MODULES", "LANGFUSE_SECRET_KEY",
            "STREAMS_LLM_BASE_URL", "KAFKA_SASL_MECHANISM", "SCHEMA_REGISTRY_PASSWORD",
            "STREAMS_REPLICATION_FACTOR", "KAFKA_EXTRA_CONFIG"} <= set(variables)


def test_from_env_reads_and_types_every_kind() -> None:
    settings = Settings.from_env({
        "KAFKA_BOOTSTRAP_SERVERS": "k1:9092,k2:9092",
        "STREAMS_PARTITIONS": "6",
        "STREAMS_SESSION_TIMEOUT": "20",
        "STREAMS_RULE_MODULES": "a.rules, b.rules,",
        "KAFKA_EXTRA_CONFIG": '{"client.id": "me", "socket.keepalive.enable": true}',
        "STREAMS_LLM_API_KEY": "",
    })
    assert settings.bootstrap_servers == "k1:9092,k2:9092"
    assert settings.partitions == 6
    assert settings.session_timeout == 20.0
    assert settings.rule_modules == ("a.rules", "b.rules")
    assert settings.kafka_extra == {"client.id": "me", "socket.keepalive.enable": "true"}
    assert settings.llm_api_key is None  # empty means unset
    assert settings.topic_prefix == "fs"


def test_overrides_win_and_an_overridden_variable_is_not_read() -> None:
    settings = Settings.from_env({"STREAMS_PARTITIONS": "nonsense", "STREAMS_TOPIC_PREFIX": "x"},
                                 partitions=4)
    assert (settings.partitions, settings.topic_prefix) == (4, "x")


@pytest.mark.parametrize(("environ", "named", "allowed"), [
    ({"STREAMS_PARTITIONS": "three"}, "STREAMS_PARTITIONS", "integer >= 1"),
    ({"STREAMS_PARTITIONS": "0"}, "STREAMS_PARTITIONS", "integer >= 1"),
    ({"STREAMS_ACTION_TIMEOUT": "-1"}, "STREAMS_ACTION_TIMEOUT", "number > 0"),
    ({"STREAMS_BATCH_WITHIN": "nan"}, "STREAMS_BATCH_WITHIN", "number > 0"),
    ({"KAFKA_SECURITY_PROTOCOL": "TLS"}, "KAFKA_SECURITY_PROTOCOL", "SASL_SSL"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_SASL_MECHANISM": "GSSAPI",
      "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": "p"}, "KAFKA_SASL_MECHANISM",
     "SCRAM-SHA-512"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "KAFKA_SASL_USERNAME", "needs"),
    ({"KAFKA_SASL_USERNAME": "u"}, "KAFKA_SASL_USERNAME", "SASL_PLAINTEXT or SASL_SSL"),
    ({"KAFKA_SSL_CA_LOCATION": "/etc/hostname"}, "KAFKA_SSL_CA_LOCATION", "SSL or SASL_SSL"),
    ({"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CA_LOCATION": "/no/such/ca.pem"},
     "KAFKA_SSL_CA_LOCATION", "not a readable file"),
    ({"KAFKA_EXTRA_CONFIG": "client.id=me"}, "KAFKA_EXTRA_CONFIG", "JSON object"),
    ({"SCHEMA_REGISTRY_USERNAME": "u"}, "SCHEMA_REGISTRY_PASSWORD", "together"),
    ({"SCHEMA_REGISTRY_URL": "registry:8081"}, "SCHEMA_REGISTRY_URL", "http(s) URL"),
    ({"STREAMS_TOPIC_PREFIX": "Has.Dots"}, "STREAMS_TOPIC_PREFIX", "[a-z]"),
    ({"STREAMS_HEARTBEAT_INTERVAL": "20"}, "STREAMS_HEARTBEAT_INTERVAL",
     "less than STREAMS_SESSION_TIMEOUT"),
])
def test_a_bad_value_fails_at_start_naming_the_variable(
    environ: dict[str, str], named: str, allowed: str,
) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env(environ)
    assert named in str(caught.value)
    assert allowed in str(caught.value)
    assert isinstance(caught.value, StreamsError)


def test_keyword_construction_is_checked_too() -> None:
    with pytest.raises(ConfigError, match="STREAMS_PARTITIONS"):
        Settings(partitions=0)
    with pytest.raises(ConfigError, match="STREAMS_FEEDBACK_MODULES"):
        Settings(feedback_modules="not.a.list")  # type: ignore[arg-type]
    assert Settings(discovery_interval=1).discovery_interval == 1.0
    assert Settings(rule_modules=["a"]).rule_modules == ("a",)  # type: ignore[arg-type]


def test_to_env_reproduces_the_settings_in_a_child(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    settings = Settings(bootstrap_servers="b:9093", security_protocol="SASL_SSL",
                        sasl_mechanism="PLAIN", sasl_username="u", sasl_password="p",
                        ssl_ca_location=str(ca), kafka_extra={"client.id": "x"},
                        topic_prefix="tp", partitions=5, batch_within=0.125,
                        feedback_modules=("m1", "m2"), llm_model="judge")
    env = settings.to_env()
    assert {f.env for _n, f, _t, _d in declared()} == set(env)
    # Whatever the parent's environment said, the child reads exactly these settings.
    noisy = {variable: "garbage" for variable in env}
    assert Settings.from_env({**noisy, **env}) == settings
    assert Settings.from_env(Settings().to_env()) == Settings()


def test_child_env_layers_base_settings_and_extras() -> None:
    settings = Settings(topic_prefix="child")
    env = settings.child_env({"PATH": "/bin", "STREAMS_TOPIC_PREFIX": "parent"},
                             STREAMS_FEEDBACK_MODULES="m")
    assert env["PATH"] == "/bin"
    assert env["STREAMS_TOPIC_PREFIX"] == "child"
    assert env["STREAMS_FEEDBACK_MODULES"] == "m"


def test_secrets_stay_out_of_repr_and_shown_values() -> None:
    settings = Settings(**SASL, langfuse_secret_key="sk-lf", llm_api_key="sk-llm",  # type: ignore[arg-type]
                        schema_registry_username="r", schema_registry_password="rp")
    for text in (repr(settings), str(settings.shown())):
        for secret in ("s3cret", "sk-lf", "sk-llm", "rp'"):
            assert secret not in text
    assert settings.shown()["KAFKA_SASL_PASSWORD"] == "***"
    assert settings.shown()["KAFKA_SASL_USERNAME"] == "ada"


def test_replace_checks_the_copy() -> None:
    settings = Settings()
    assert settings.replace(partitions=7).partitions == 7
    with pytest.raises(ConfigError):
        settings.replace(security_protocol="SASL_PLAINTEXT")


def test_chat_model_from_settings() -> None:
    model = Settings.from_env({
        "STREAMS_LLM_BASE_URL": "https://llm.example/v1/",
        "STREAMS_LLM_MODEL": "gpt-4o-mini",
        "STREAMS_LLM_API_KEY": "sk-secret",
        "STREAMS_LLM_TIMEOUT": "12.5",
        "STREAMS_LLM_MAX_RETRIES": "4",
        "STREAMS_LLM_MAX_IN_FLIGHT": "6",
    }).chat_model()
    assert model == ChatModel("https://llm.example/v1", "gpt-4o-mini", "sk-secret",
                              timeout=12.5, max_retries=4, max_in_flight=6)
    assert model.completions_url == "https://llm.example/v1/chat/completions"
    assert "sk-secret" not in repr(model)

    bare = Settings.from_env({"STREAMS_LLM_BASE_URL": "http://127.0.0.1:8000/v1",
                              "STREAMS_LLM_MODEL": "local"}).chat_model()
    assert (bare.api_key, bare.timeout, bare.max_retries, bare.max_in_flight) == \
        (None, 30.0, 2, 32)
    with pytest.raises(ConfigError, match="STREAMS_LLM_MAX_IN_FLIGHT"):
        Settings.from_env({"STREAMS_LLM_MAX_IN_FLIGHT": "0"})
    assert Settings.from_env({}).chat_model(base_url="http://h/v1", model="m").model == "m"
    with pytest.raises(ValueError, match="STREAMS_LLM_BASE_URL"):
        Settings.from_env({"STREAMS_LLM_MODEL": "m"}).chat_model()
    with pytest.raises(ValueError, match="STREAMS_LLM_MODEL"):
        Settings.from_env({"STREAMS_LLM_BASE_URL": "http://h/v1"}).chat_model()


def test_the_judges_price_table_is_read_and_a_bad_one_refused_at_start() -> None:
    table = Settings.from_env({"STREAMS_LLM_PRICES": '{"m": {"prompt": 1, "completion": 4}}'})
    assert table.llm_price_table()["m"].of(1_000_000, 250_000) == 2.0
    assert Settings.from_env({}).llm_price_table() == {}
    with pytest.raises(ConfigError, match=r"STREAMS_LLM_PRICES: price of model 'm': "
                                          r"'completion' must be a number >= 0"):
        Settings.from_env({"STREAMS_LLM_PRICES": '{"m": {"prompt": 1, "completion": -4}}'})


def doc_table() -> str:
    text = RUNNING.read_text()
    found = re.search(r"<!-- settings:begin.*?-->\n(.*?)<!-- settings:end -->", text, re.S)
    assert found, "docs/running.md lost its settings markers"
    return found.group(1)


def test_the_doc_table_is_the_declaration() -> None:
    assert doc_table() == markdown_table(), (
        "docs/running.md's configuration table differs from streams/settings.py: paste the "
        "output of `python -m streams settings --markdown` between its markers")


def test_the_table_has_a_row_per_setting() -> None:
    rows = [line for line in markdown_table().splitlines()[2:] if line.startswith("| `")]
    assert len(rows) == len(list(declared()))
    assert "| `STREAMS_PARTITIONS` | integer | `3` |" in markdown_table()


def test_a_password_file_replaces_the_password(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    base = {k: v for k, v in SASL.items() if k != "sasl_password"}
    settings = Settings(**base, sasl_password_file=str(secret))  # type: ignore[arg-type]
    assert settings.sasl_secret() == "from-file"
    assert Settings(**SASL).sasl_secret() == "s3cret"  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="KAFKA_SASL_PASSWORD and KAFKA_SASL_PASSWORD_FILE"):
        Settings(**SASL, sasl_password_file=str(secret))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"needs KAFKA_SASL_PASSWORD \(or KAFKA_SASL_PASSWORD_F"):
        Settings(**base)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="KAFKA_SASL_PASSWORD_FILE set but"):
        Settings(sasl_password_file=str(secret))
    secret.write_text("\n")
    with pytest.raises(ConfigError, match=r"KAFKA_SASL_PASSWORD_FILE .* is empty"):
        settings.sasl_secret()
    secret.unlink()
    with pytest.raises(ConfigError, match="cannot be read"):
        settings.sasl_secret()


@pytest.mark.parametrize(("text", "value"), [("true", True), ("FALSE", False), ("0", False),
                                             ("yes", True)])
def test_booleans_read_from_the_environment(text: str, value: bool) -> None:
    assert Settings.from_env({"KAFKA_SSL_CHECK_HOSTNAME": text}).ssl_check_hostname is value


def test_a_bad_boolean_names_its_variable() -> None:
    with pytest.raises(ConfigError, match="KAFKA_SSL_CHECK_HOSTNAME must be true or false"):
        Settings.from_env({"KAFKA_SSL_CHECK_HOSTNAME": "maybe"})
    with pytest.raises(ConfigError, match="KAFKA_SSL_CHECK_HOSTNAME"):
        Settings(ssl_check_hostname="no")  # type: ignore[arg-type]


def test_min_insync_replicas_is_at_most_the_replication_factor() -> None:
    assert Settings(replication_factor=3, min_insync_replicas=2).min_insync_replicas == 2
    with pytest.raises(ConfigError, match=r"STREAMS_MIN_INSYNC_REPLICAS .* more than "
                                           r"STREAMS_REPLICATION_FACTOR"):
        Settings(replication_factor=1, min_insync_replicas=2)


def test_the_registry_ca_must_be_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="SCHEMA_REGISTRY_CA_LOCATION"):
        Settings(schema_registry_ca_location=str(tmp_path / "none.pem"))
    ca = tmp_path / "ca.pem"
    ca.write_text("pem")
    assert Settings(schema_registry_ca_location=str(ca)).schema_registry_ca_location == str(ca)


def test_calibration_settings_give_the_policy_and_a_bad_one_is_refused_at_start() -> None:
    policy = Settings.from_env({"STREAMS_CALIBRATION_THRESHOLDS": '{"judge": 0.4}',
                                "STREAMS_CALIBRATION_WINDOW": "50",
                                "STREAMS_CALIBRATION_MIN_PAIRS": "10"}).calibration_policy()
    assert (policy.thresholds, policy.window, policy.min_pairs) == ({"judge": 0.4}, 50, 10)
    with pytest.raises(ConfigError, match=r"STREAMS_CALIBRATION_THRESHOLDS: .*'judge' is 2"):
        Settings.from_env({"STREAMS_CALIBRATION_THRESHOLDS": '{"judge": 2}'})
    with pytest.raises(ConfigError, match="min_pairs must be between 1 and the window"):
        Settings.from_env({"STREAMS_CALIBRATION_WINDOW": "10",
                           "STREAMS_CALIBRATION_MIN_PAIRS": "20"})


def test_the_registry_proxy_forwards_to_its_upstream_with_its_own_credentials() -> None:
    shared = {"SCHEMA_REGISTRY_URL": "http://proxy:8781", "SCHEMA_REGISTRY_USERNAME": "svc",
              "SCHEMA_REGISTRY_PASSWORD": "svc-pw"}
    plain = Settings.from_env(shared)
    assert plain.behind_registry_proxy() == plain  # no upstream: the registry it names
    behind = Settings.from_env({**shared, "STREAMS_REGISTRY_UPSTREAM_URL": "http://r:8081/x"})
    proxy = behind.behind_registry_proxy()
    assert (proxy.schema_registry_url, proxy.schema_registry_username,
            proxy.schema_registry_password) == ("http://r:8081/x", None, None)
    with pytest.raises(ConfigError, match="STREAMS_REGISTRY_UPSTREAM_USERNAME and "
                                          "STREAMS_REGISTRY_UPSTREAM_PASSWORD go together"):
        Settings.from_env({"STREAMS_REGISTRY_UPSTREAM_USERNAME": "u"})
