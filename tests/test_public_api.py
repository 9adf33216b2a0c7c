import streams


def test_all_is_sorted_and_complete() -> None:
    assert streams.__all__ == sorted(streams.__all__)
    for name in streams.__all__:
        assert getattr(streams, name) is not None


SHELL = ("confluent_kafka", "faust", "httpx", "opentelemetry", "aiokafka", "langfuse")


def _loaded_after(code: str) -> list[str]:
    import json
    import subprocess
    import sys

    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                         text=True).stdout
    return [m for m in json.loads(out) if m.split(".")[0] in SHELL]


def test_declaring_types_and_rules_loads_no_runtime_library() -> None:
    code = ("import streams\n"
            "from streams import F, Feedback, Rule, RunTarget, UserActor, on, run\n"
            "class Q(Feedback, targets={'run'}):\n    ok: bool\n"
            "Rule(name='r', when=on('feedback_given'), then=run('x'))\n")
    assert _loaded_after(code) == []


def test_a_runtime_name_loads_the_runtime_on_first_use() -> None:
    loaded = _loaded_after("import streams\nstreams.StreamsClient\n")
    assert "confluent_kafka" in {m.split(".")[0] for m in loaded}


def test_an_unknown_name_is_an_attribute_error() -> None:
    import pytest

    with pytest.raises(AttributeError, match="no_such_name"):
        _ = streams.no_such_name  # type: ignore[attr-defined]
