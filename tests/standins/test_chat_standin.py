"""The chat completions stand-in, driven over loopback with httpx."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from standins.chat_standin import ChatReply, ChatStandIn


def _ask(chat: ChatStandIn, content: str = "hello there", **extra: Any) -> httpx.Response:
    body = {"model": "standin-judge", "messages": [{"role": "user", "content": content}],
            **extra}
    return httpx.post(f"{chat.url}/chat/completions", json=body, timeout=5)


@pytest.fixture
def chat() -> Iterator[ChatStandIn]:
    with ChatStandIn() as server:
        yield server


def test_url_is_a_loopback_base_url(chat: ChatStandIn) -> None:
    assert chat.url.startswith("http://127.0.0.1:")
    assert chat.url.endswith("/v1")
    assert int(chat.url.rsplit(":", 1)[1].split("/")[0]) > 0


def test_answers_a_chat_completion_with_queued_content(chat: ChatStandIn) -> None:
    chat.enqueue('{"ok": true}')
    response = _ask(chat, "one two three", temperature=0)
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "standin-judge"
    assert isinstance(body["created"], int)
    [choice] = body["choices"]
    assert choice["index"] == 0
    assert choice["finish_reason"] == "stop"
    assert choice["message"] == {"role": "assistant", "content": '{"ok": true}', "refusal": None}
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def test_queue_is_first_in_first_out_and_records_requests(chat: ChatStandIn) -> None:
    chat.enqueue("first", ChatReply.text("second"))
    assert chat.pending == 2
    assert _ask(chat, "a").json()["choices"][0]["message"]["content"] == "first"
    assert _ask(chat, "b", temperature=0).json()["choices"][0]["message"]["content"] == "second"
    assert chat.pending == 0
    assert chat.calls == 2
    requests = chat.requests
    assert [r["messages"][0]["content"] for r in requests] == ["a", "b"]
    assert requests[1]["temperature"] == 0
    requests[0]["model"] = "changed"  # copies: the record is not affected
    assert chat.requests[0]["model"] == "standin-judge"
    [first, _] = chat.request_log
    assert (first.method, first.path) == ("POST", "/v1/chat/completions")
    assert first.headers["Content-Type"] == "application/json"


def test_responder_answers_when_nothing_is_queued() -> None:
    seen: list[dict[str, Any]] = []

    def responder(request: dict[str, Any]) -> str:
        seen.append(request)
        return f"echo {request['messages'][-1]['content']}"

    with ChatStandIn(responder) as chat:
        chat.enqueue("queued")
        assert _ask(chat, "x").json()["choices"][0]["message"]["content"] == "queued"
        assert _ask(chat, "y").json()["choices"][0]["message"]["content"] == "echo y"
        chat.set_responder(lambda _: ChatReply.refuse("no"))
        assert _ask(chat).json()["choices"][0]["message"]["refusal"] == "no"
        chat.set_responder(None)
        assert _ask(chat).status_code == 500
    assert [r["messages"][0]["content"] for r in seen] == ["y"]


def test_unscripted_and_broken_responders_answer_500(chat: ChatStandIn) -> None:
    response = _ask(chat)
    assert response.status_code == 500
    assert "no reply scripted" in response.json()["error"]["message"]

    def broken(_: dict[str, Any]) -> str:
        raise RuntimeError("oops")

    chat.set_responder(broken)
    response = _ask(chat)
    assert response.status_code == 500
    assert "oops" in response.json()["error"]["message"]


def test_refusal_and_content_filter(chat: ChatStandIn) -> None:
    chat.enqueue(ChatReply.refuse("I can't help with that."), ChatReply.filtered())
    refused = _ask(chat).json()["choices"][0]
    assert refused["message"]["content"] is None
    assert refused["message"]["refusal"] == "I can't help with that."
    filtered = _ask(chat).json()["choices"][0]
    assert filtered["finish_reason"] == "content_filter"
    assert filtered["message"]["content"] is None


def test_error_statuses_with_openai_bodies(chat: ChatStandIn) -> None:
    chat.enqueue(ChatReply.error(429, "slow down", retry_after=2), ChatReply.error(503),
                 ChatReply.error(400, "bad request"))
    limited = _ask(chat)
    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "2"
    assert limited.json()["error"]["type"] == "rate_limit_error"
    assert limited.json()["error"]["message"] == "slow down"
    unavailable = _ask(chat)
    assert unavailable.status_code == 503
    assert unavailable.json()["error"]["type"] == "server_error"
    bad = _ask(chat)
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "invalid_request_error"
    assert chat.calls == 3


def test_raw_bodies_usage_and_model_overrides(chat: ChatStandIn) -> None:
    chat.enqueue(ChatReply.raw("not json at all"),
                 ChatReply(content="x", usage={"prompt_tokens": 9}, model="other-model"))
    raw = _ask(chat)
    assert raw.status_code == 200
    assert raw.text == "not json at all"
    body = _ask(chat).json()
    assert body["usage"] == {"prompt_tokens": 9}
    assert body["model"] == "other-model"


def test_delay_lets_a_client_time_out(chat: ChatStandIn) -> None:
    chat.enqueue(ChatReply.slow(1.0, "late"), "prompt")
    started = time.monotonic()
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{chat.url}/chat/completions", timeout=0.2,
                   json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert time.monotonic() - started < 0.9
    assert chat.calls == 1  # recorded although the client gave up
    assert _ask(chat).json()["choices"][0]["message"]["content"] == "prompt"


def test_invalid_requests(chat: ChatStandIn) -> None:
    assert httpx.post(f"{chat.url}/chat/completions", content=b"{nope", timeout=5,
                      headers={"Content-Type": "application/json"}).status_code == 400
    assert httpx.post(f"{chat.url}/chat/completions", json={"model": "m"},
                      timeout=5).status_code == 400
    assert httpx.post(f"{chat.url}/chat/completions", json={"model": "m", "messages": []},
                      timeout=5).status_code == 400
    assert httpx.get(f"{chat.url}/chat/completions", timeout=5).status_code == 405
    assert httpx.post(f"{chat.url}/completions", json={}, timeout=5).status_code == 404
    assert chat.calls == 4
    assert chat.requests == [{"model": "m"}, {"model": "m", "messages": []}]


def test_api_key_is_checked_when_set() -> None:
    with ChatStandIn(api_key="sk-test") as chat:
        chat.enqueue("ok")
        refused = _ask(chat)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "invalid_api_key"
        allowed = httpx.post(
            f"{chat.url}/chat/completions", timeout=5,
            headers={"Authorization": "Bearer sk-test"},
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
        assert allowed.status_code == 200


def test_reset_forgets_queue_and_requests(chat: ChatStandIn) -> None:
    chat.enqueue("a", "b")
    _ask(chat)
    chat.reset()
    assert (chat.pending, chat.calls, chat.requests) == (0, 0, [])


def test_stop_and_start_again_on_the_same_url() -> None:
    chat = ChatStandIn()
    with pytest.raises(RuntimeError):
        _ = chat.url
    chat.start()
    url = chat.url
    chat.enqueue("a")
    chat.stop()
    with pytest.raises(httpx.ConnectError):
        _ask(chat)
    chat.start()
    try:
        assert chat.url == url
        assert _ask(chat).json()["choices"][0]["message"]["content"] == "a"
    finally:
        chat.stop()


def test_past_max_in_flight_a_chat_request_gets_429_and_bad_requests_take_no_place() -> None:
    release = threading.Event()

    def held(_body: dict[str, Any]) -> ChatReply:
        release.wait(10)  # the first request keeps its place until the test lets it go
        return ChatReply.text("{}")

    with ChatStandIn(held, max_in_flight=1) as chat:
        slow = threading.Thread(target=_ask, args=(chat,))
        slow.start()
        deadline = time.monotonic() + 5
        while chat.peak_in_flight < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        # Requests that are not chat completions are answered as before, not refused.
        assert httpx.get(f"{chat.url}/models", timeout=5).status_code == 404
        assert httpx.post(f"{chat.url}/chat/completions", json={}, timeout=5).status_code == 400
        refused = _ask(chat)
        release.set()
        slow.join()
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert (chat.peak_in_flight, chat.refused_in_flight) == (1, 1)
        assert _ask(chat).status_code == 200  # the place was given back
