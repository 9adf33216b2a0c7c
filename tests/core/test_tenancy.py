import ast
import re
from pathlib import Path

import pytest

import streams
from streams.core.errors import ValidationFailed
from streams.core.tenancy import (
    DEADLETTER,
    EVENTS,
    RULEBOOK,
    RULES,
    SCORES,
    TENANT_KINDS,
    check_cursor,
    check_tenant,
    check_workspace,
    commands_topic,
    control_topic,
    dead_letter_topic,
    decider_group,
    fresh_group,
    index_topic,
    keys_topic,
    parse_topic,
    reader_group,
    redriven_topic,
    replay_group,
    rulebook_follower_group,
    rulebook_group,
    rulebook_tenant,
    rulebook_topic,
    rules_catch_up_group,
    rulestate_reader_group,
    rulestate_topic,
    sibling_topic,
    sink_group,
    tail_group,
    tenant_prefix,
    tenant_topic,
    tenant_topics,
    tenants_pattern,
    topic_kind,
    unrouted_deadletter_topic,
    worker_app_group,
    worker_group,
    worker_rules_group,
    workspace_sink_group,
)


def test_topic_names() -> None:
    topics = tenant_topics("acme", "fs")
    assert topics.all() == ("fs.acme.events", "fs.acme.scores", "fs.acme.deadletter",
                            "fs.acme.rules")


@pytest.mark.parametrize("name", ["", "Acme", "a.b", "1abc", "a" * 49, "has space", "ü"])
def test_invalid_tenant_names_refused(name: str) -> None:
    with pytest.raises(ValidationFailed, match="invalid tenant name"):
        check_tenant(name)


def test_valid_names() -> None:
    assert check_tenant("acme-eu-1") == "acme-eu-1"


def test_parse_topic() -> None:
    assert parse_topic("fs.acme.events", "fs") == ("acme", "events")
    assert parse_topic("fs.acme.scores", "fs") == ("acme", "scores")
    assert parse_topic("fs.acme.rules", "fs") == ("acme", "rules")
    assert parse_topic("other.acme.events", "fs") is None
    assert parse_topic("fs._control", "fs") is None
    assert parse_topic("fs.acme.unknown", "fs") is None


@pytest.mark.parametrize("bad", ["acme\n", "acme\r\n", "\nacme", "acme ", ""])
def test_tenant_names_are_matched_whole(bad: str) -> None:
    with pytest.raises(ValidationFailed, match="invalid tenant name"):
        check_tenant(bad)


@pytest.mark.parametrize("good", ["prod", "Prod-2", "team_a.eu", "0"])
def test_workspace_names(good: str) -> None:
    assert check_workspace(good) == good


@pytest.mark.parametrize("bad", ["", "prod\n", "-prod", "a b", "x" * 65, "ws/1"])
def test_bad_workspace_names_are_refused_with_the_pattern(bad: str) -> None:
    with pytest.raises(ValidationFailed, match="invalid workspace name"):
        check_workspace(bad)


# -- every name of the one scheme (deployments, manifests and ACLs depend on these) ---------


def test_every_tenant_topic_name() -> None:
    topics = tenant_topics("acme", "fs")
    assert (topics.index, topics.rulebook, topics.redriven, topics.commands) == (
        "fs.acme.index", "fs.acme.rulebook", "fs.acme.redriven", "fs.acme.commands")
    assert topics.every() == (
        "fs.acme.events", "fs.acme.scores", "fs.acme.deadletter", "fs.acme.rules",
        "fs.acme.index", "fs.acme.rulebook", "fs.acme.commands", "fs.acme.redriven",
        "fs.acme.rulestate", "fs.acme.queues", "fs.acme.leases")
    assert topics.queues == "fs.acme.queues"
    assert topics.leases == "fs.acme.leases"
    assert topics.rulestate == rulestate_topic("acme") == "fs.acme.rulestate"
    assert rulestate_reader_group("fs.acme.rulestate") == "fs.acme.rulestate.restore"
    assert index_topic("acme", "x") == "x.acme.index"
    assert rulebook_topic("acme") == "fs.acme.rulebook"
    assert commands_topic("acme", "fs") == "fs.acme.commands"
    assert redriven_topic("fs.acme.deadletter") == "fs.acme.redriven"
    assert [tenant_topic("acme", kind) for kind in TENANT_KINDS] == [
        f"fs.acme.{kind}" for kind in
        ("events", "scores", "deadletter", "rules", "index", "rulebook", "redriven", "commands",
         "rulestate", "queues", "leases")]


def test_tenant_topics_refuse_bad_names_and_kinds() -> None:
    with pytest.raises(ValidationFailed, match="invalid tenant name"):
        commands_topic("Acme")
    with pytest.raises(ValidationFailed, match="invalid topic prefix"):
        tenant_topics("acme", "F S")
    with pytest.raises(ValidationFailed, match="unknown topic kind"):
        tenant_topic("acme", "logs")
    with pytest.raises(ValidationFailed, match="not a dead-letter topic"):
        redriven_topic("fs.acme.events")
    with pytest.raises(ValidationFailed, match="not a tenant topic"):
        sibling_topic("fs._keys", SCORES)


def test_kinds_and_siblings_parse_back() -> None:
    assert topic_kind("fs.acme.rulebook") == RULEBOOK
    assert topic_kind("fs.acme.scores") == SCORES
    assert topic_kind("fs._control") is None
    assert topic_kind("fs.acme.logs") is None
    assert sibling_topic("fs.acme.events", SCORES) == "fs.acme.scores"
    assert rulebook_tenant("fs.acme.rulebook") == "acme"
    assert rulebook_tenant("fs.acme.rules") is None
    assert rulebook_tenant("xx.acme.rulebook", "fs") is None
    # parse_topic knows the four kinds every tenant has, not the on-demand ones.
    assert parse_topic("fs.acme.deadletter") == ("acme", DEADLETTER)
    assert parse_topic("fs.acme.index") is None
    assert tenant_prefix("acme", "fs") == "fs.acme."


def test_process_wide_topics() -> None:
    assert control_topic("fs") == "fs._control"
    assert keys_topic("fs") == "fs._keys"
    assert unrouted_deadletter_topic("fs") == "fs.unrouted.deadletter"
    assert dead_letter_topic("fs", "fs.acme.scores") == "fs.acme.deadletter"
    assert dead_letter_topic("fs", "fs._control") == "fs.unrouted.deadletter"
    assert dead_letter_topic("fs", "other.acme.events") == "fs.unrouted.deadletter"
    # No tenant can be called `_control` or `_keys`: the names cannot collide.
    for name in (control_topic(), keys_topic()):
        assert parse_topic(name) is None
        with pytest.raises(ValidationFailed):
            check_tenant(name.split(".", 1)[1])


def test_worker_and_decider_groups() -> None:
    # deploy/k8s (KEDA scales on fs-feedback-mirror) and the service ACLs (`fs-`) name these.
    assert worker_group("feedback-mirror", "fs") == "fs-feedback-mirror"
    assert worker_rules_group("feedback-mirror", "fs") == "fs-feedback-mirror-rules"
    assert worker_app_group("feedback-mirror", "fs") == "fs-feedback-mirror-app"
    assert decider_group("fs") == "fs-rule-decider"
    assert replay_group("fs.acme.rules") == "fs.acme.rules.rebuild"
    assert rulebook_group("fs") == "fs-rulebook"
    assert rulebook_follower_group("fs") == "fs-rulebook-follower"
    assert rules_catch_up_group("fs") == "fs-rules-catch-up"


def test_sink_groups() -> None:
    assert sink_group("langfuse", "fs") == "fs.sink.langfuse"
    assert workspace_sink_group("warehouse", "acme", "prod", "fs") == \
        "fs.sink.warehouse.acme.prod"
    fresh = sink_group(None, "fs")
    assert fresh.startswith("fs.sink-nocursor.") and fresh != sink_group(None, "fs")
    for bad in ("", "Langfuse", "a.b", "x" * 65):
        with pytest.raises(ValidationFailed, match="invalid cursor name"):
            sink_group(bad)
    assert check_cursor("warehouse_2") == "warehouse_2"


def test_reader_groups() -> None:
    group = reader_group("fs.acme.events", "reader", "fs")
    assert group.startswith("fs.acme.reader-") and group != reader_group(
        "fs.acme.events", "reader", "fs")
    assert reader_group("fs._keys", "reader", "fs").startswith("streams-reader-")
    assert tail_group().startswith("streams-tail-") and tail_group() != tail_group()
    assert fresh_group("report").startswith("report_")
    assert fresh_group("demo-watch").startswith("demo-watch_")


def test_cross_tenant_patterns() -> None:
    assert tenants_pattern(EVENTS, "fs") == r"^fs\.[a-z][a-z0-9-]*\.events$"
    for kind, match, other in [(EVENTS, "fs.acme.events", "fs.acme.scores"),
                               (SCORES, "fs.acme-2.scores", "fs.acme.scores.x"),
                               (RULES, "fs.a.rules", "fs.a.rulebook"),
                               (RULEBOOK, "fs.a.rulebook", "xfs.a.rulebook")]:
        pattern = re.compile(tenants_pattern(kind, "fs"))
        assert pattern.match(match) and not pattern.match(other)
    assert not re.match(tenants_pattern(EVENTS, "fs"), "fs._control")
    assert re.match(tenants_pattern(EVENTS, "my-fs"), "my-fs.acme.events")
    with pytest.raises(ValidationFailed, match="unknown topic kind"):
        tenants_pattern("logs")


# -- nothing else spells a name ---------------------------------------------------------------

PACKAGE = Path(streams.__file__).parent
TENANCY = PACKAGE / "core" / "tenancy.py"

# A topic kind or a group suffix as part of a name: `.events`, `._keys`, `-rule-decider`,
# `.sink.` ... (docstrings and comments may describe the scheme; code calls tenancy).
SPELLED = re.compile(
    r"\.(?:events|scores|deadletter|rules|index|rulebook|redriven|commands|rulestate|rebuild|restore)(?![\w])"
    r"|\._(?:control|keys)(?![\w])|\.unrouted\."
    r"|(?<!-)-(?:rule-decider|rulebook|rules|app)(?![\w])|-rules-catch-up"
    r"|\.sink\.|sink-nocursor|streams-tail-")
# A dotted module, metric or logger name (`streams.core.rules`) is not a topic.
DOTTED = re.compile(r"streams(?:\.\w+)+")
# Files whose strings spell these words as something else than a topic or group, and why.
ALLOWED = {
    "adapters/avro/schemas.py": "Avro namespaces (streams.events.Envelope), not topics",
}


def _strings(source: str) -> list[tuple[int, str]]:
    """Every string constant and f-string part of `source` but docstrings."""
    tree = ast.parse(source)
    docs = {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs]


def _spellings(source: str) -> list[tuple[int, str]]:
    found = []
    for line, text in _strings(source):
        for match in SPELLED.finditer(text):
            start = match.start()  # the dotted word the match is part of begins here
            while start and (text[start - 1].isalnum() or text[start - 1] in "_."):
                start -= 1
            if not DOTTED.match(text, start):
                found.append((line, text))
                break
    return found


def test_the_check_finds_spelled_names() -> None:
    # It cannot pass by finding nothing: every way a name was spelled before is caught,
    # tenancy itself spells them, and the package has its modules.
    spelled = '''
"""A docstring may say fs.acme.events and fs-rule-decider."""
a = f"{prefix}.{tenant}.commands"
b = f"^{re.escape(prefix)}\\\\.[a-z][a-z0-9-]*\\\\.scores$"
c = f"{prefix}._keys"
d = f"{prefix}-rule-decider"
e = f"{prefix}.sink.{cursor}"
f = f"{group}-rules"
g = topic.endswith(".deadletter")
h = f"streams-tail-{uuid.uuid4().hex}"
i = f"{topic}.rebuild"
j = "streams.core.rules"
k = "--rules"
'''
    assert [line for line, _ in _spellings(spelled)] == list(range(3, 12))
    assert len(_spellings(TENANCY.read_text())) >= 10
    assert len(list(PACKAGE.rglob("*.py"))) > 100


def test_only_tenancy_spells_topic_and_group_names() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if path == TENANCY or rel in ALLOWED:
            continue
        found += [f"streams/{rel}:{line}: {text!r}"
                  for line, text in _spellings(path.read_text())]
    assert not found, ("topic or group names spelled outside streams/core/tenancy.py; "
                       "call its functions instead:\n" + "\n".join(found))
