"""The server through the official ``openai`` client and raw HTTP, on 127.0.0.1 with the demo pair."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from specchat.core.types import FinishReason
from specchat.server.app import ServerConfig
from support.api_clients import client, error_body, extra, usage_of

QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is a bicycle?"}]


def wait_until(check, what: str, seconds: float = 120.0) -> None:
    """Poll ``check`` until it holds (a liveness wait, not a speed claim)."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


def test_models_lists_the_loaded_pair(served) -> None:
    models = client(served).models.list().data
    assert [m.id for m in models] == [served.host.info.model_id]
    listed = extra(models[0])["specchat"]
    assert listed["draft"] == served.host.info.draft and listed["default_drafter"] == "composite"


def test_a_chat_completion_has_usage_and_speculative_figures(served) -> None:
    reply = client(served).chat.completions.create(model="any", messages=QUESTION, max_tokens=24, temperature=0)
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    usage = usage_of(reply)
    assert usage.prompt_tokens > 5 and 0 < usage.completion_tokens <= 24
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    spec = extra(reply)["speculative"]
    assert spec["drafter"] == "composite" and spec["depth"] == "auto"
    assert spec["accepted"] <= spec["drafted"] and spec["passes"] >= 1
    assert sum(s["drafted"] for s in spec["by_source"].values()) == spec["drafted"]
    assert sum(s["accepted"] for s in spec["by_source"].values()) == spec["accepted"]
    assert spec["speedup"] is None or spec["speedup"] > 0
    assert spec["speedup_note"]


def test_streaming_gives_the_same_text_usage_and_token_fates(served) -> None:
    api = client(served)
    whole = api.chat.completions.create(model="m", messages=QUESTION, max_tokens=32, temperature=0)
    chunks = list(
        api.chat.completions.create(
            model="m",
            messages=QUESTION,
            max_tokens=32,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"speculative": {"fates": True}},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and extra(finals[0])["speculative"]["passes"] >= 1
    assert chunks[-1].choices == [] and usage_of(chunks[-1]).completion_tokens == usage_of(whole).completion_tokens
    fates = [f for c in chunks if c.choices for f in extra(c.choices[0]).get("specchat_fates") or []]
    assert {f["fate"] for f in fates} <= {"accepted", "rejected", "target"}
    kept = [f for f in fates if f["fate"] != "rejected"]
    assert len(kept) == usage_of(whole).completion_tokens
    assert "".join(f["text"] for f in kept).startswith(text)
    assert sum(f["fate"] == "accepted" for f in fates) == extra(chunks[-1])["speculative"]["accepted"]


def test_completions_take_a_raw_prompt(served) -> None:
    api = client(served)
    whole = api.completions.create(model="m", prompt="The capital of France is", max_tokens=8, temperature=0)
    assert whole.object == "text_completion" and whole.choices[0].text and usage_of(whole).completion_tokens <= 8
    streamed = "".join(
        c.choices[0].text
        for c in api.completions.create(
            model="m", prompt="The capital of France is", max_tokens=8, temperature=0, stream=True
        )
        if c.choices
    )
    assert streamed == whole.choices[0].text


def test_a_request_may_choose_its_drafter_and_depth(served) -> None:
    api = client(served)
    plain = api.chat.completions.create(
        model="m", messages=QUESTION, max_tokens=12, extra_body={"speculative": {"depth": 0}}
    )
    assert extra(plain)["speculative"]["drafted"] == 0 and extra(plain)["speculative"]["depth"] == 0
    lookup = api.chat.completions.create(
        model="m", messages=QUESTION, max_tokens=12, extra_body={"speculative": {"drafter": "ngram"}}
    )
    assert extra(lookup)["speculative"]["drafter"] == "ngram"
    assert set(extra(lookup)["speculative"]["by_source"]) <= {"lookup"}
    model = api.chat.completions.create(
        model="m", messages=QUESTION, max_tokens=12, extra_body={"speculative": {"drafter": "draft", "depth": 3}}
    )
    assert set(extra(model)["speculative"]["by_source"]) <= {"model"}
    with pytest.raises(openai.BadRequestError) as caught:
        api.chat.completions.create(model="m", messages=QUESTION, extra_body={"speculative": {"drafter": "mtp"}})
    assert error_body(caught.value)["param"] == "speculative.drafter"


def test_stop_strings_end_the_reply_before_them(served) -> None:
    api = client(served)
    whole = api.chat.completions.create(model="m", messages=QUESTION, max_tokens=40, temperature=0)
    text = whole.choices[0].message.content
    assert text is not None
    stop = text[10:14]
    cut = api.chat.completions.create(model="m", messages=QUESTION, max_tokens=40, temperature=0, stop=[stop])
    assert cut.choices[0].message.content == text[: text.find(stop)]
    assert cut.choices[0].finish_reason == "stop"
    streamed = "".join(
        c.choices[0].delta.content or ""
        for c in api.chat.completions.create(
            model="m", messages=QUESTION, max_tokens=40, temperature=0, stop=[stop], stream=True
        )
        if c.choices
    )
    assert streamed == text[: text.find(stop)]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"n": 2}, "n"),
        ({"logprobs": True}, "logprobs"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}
                ]
            },
            "messages[0].content[0]",
        ),
        ({"max_tokens": 10**9}, "max_tokens"),
    ],
)
def test_unsupported_requests_are_openai_shaped_400s(served, fields: dict[str, object], param: str) -> None:
    request = {"model": "m", "messages": QUESTION, **fields}
    with pytest.raises(openai.BadRequestError) as caught:
        # Deliberately outside what the client's types allow: the server must refuse it.
        client(served).chat.completions.create(**request)  # type: ignore[call-overload]
    assert caught.value.status_code == 400
    assert error_body(caught.value)["param"] == param and error_body(caught.value)["type"] == "invalid_request_error"


def test_a_prompt_over_the_context_is_a_400(served) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client(served).chat.completions.create(model="m", messages=[{"role": "user", "content": "word " * 3000}])
    assert error_body(caught.value)["code"] == "context_length_exceeded"


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_a_prompt_far_over_the_context_is_refused_by_the_windows_guard(served, path: str) -> None:
    """3 MB of text: refused from its size alone ("at least"), before it is tokenized, as the window refuses it."""
    text = "word " * 600_000
    body = {
        "model": "m",
        "max_tokens": 4,
        **({"prompt": text} if path == "/v1/completions" else {"messages": [{"role": "user", "content": text}]}),
    }
    answer = httpx.post(served.url + path, json=body, timeout=120)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["param"] == ("prompt" if path == "/v1/completions" else "messages")
    n_ctx = served.host.info.n_ctx
    assert error["message"].startswith("the prompt is at least ") and error["message"].endswith(
        f"tokens but the context holds {n_ctx}"
    )
    assert client(served).completions.create(model="m", prompt="Hi", max_tokens=2).choices[0].text is not None


def post(served, body: bytes | str, path: str = "/v1/chat/completions", **headers: str) -> httpx.Response:
    headers = {"content-type": "application/json", **headers}
    return httpx.post(served.url + path, content=body, headers=headers, timeout=120)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b'{"model": "m", "messages": [', 400),
        (b"[]", 400),
        (b"\xff\xfe\x00", 400),
        (b'{"messages": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", 400),
        (b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * (10 << 20) + b'"}]}', 413),
    ],
)
def test_malformed_and_oversized_bodies_get_errors_and_the_server_goes_on(served, body: bytes, status: int) -> None:
    answer = post(served, body)
    assert answer.status_code == status
    error = answer.json()["error"]
    assert error["message"] and error["type"] == "invalid_request_error"
    assert client(served).models.list().data  # still serving


def test_other_refusals_are_openai_shaped(served) -> None:
    assert post(served, b"{}", path="/v1/nope").json()["error"]["message"] == "no such endpoint: /v1/nope"
    wrong_method = httpx.get(served.url + "/v1/chat/completions")
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["message"]
    as_text = post(served, json.dumps({"messages": QUESTION}), **{"content-type": "text/plain"})
    assert as_text.status_code == 415
    rebound = post(served, json.dumps({"messages": QUESTION}), host="evil.example:80")
    assert rebound.status_code == 403 and rebound.json()["error"]["code"] == "host_not_allowed"


def test_a_wrong_or_missing_key_is_a_401(serve) -> None:
    with serve(ServerConfig(api_key="s3cret")) as s:
        with pytest.raises(openai.AuthenticationError) as caught:
            client(s, key="wrong").chat.completions.create(model="m", messages=QUESTION, max_tokens=2)
        assert caught.value.status_code == 401 and error_body(caught.value)["code"] == "invalid_api_key"
        assert httpx.get(s.url + "/v1/models").status_code == 401
        assert client(s, key="s3cret").chat.completions.create(model="m", messages=QUESTION, max_tokens=2).choices


def test_a_client_that_disconnects_mid_stream_stops_its_decode(served) -> None:
    before = len(served.host.served)
    body = {"model": "m", "messages": QUESTION, "max_tokens": 1500, "stream": True, "speculative": {"depth": 0}}
    with (
        httpx.Client(timeout=120) as http,
        http.stream("POST", served.url + "/v1/chat/completions", json=body) as answer,
    ):
        lines = answer.iter_lines()
        seen = [line for line, _ in zip(lines, range(6), strict=False) if line.startswith("data:")]
        assert len(seen) >= 3
    wait_until(lambda: len(served.host.served) > before, "the cancelled request to finish")
    record = served.host.served[-1]
    assert record.reason is FinishReason.CANCELLED and record.generated < 1500
    after = client(served).chat.completions.create(model="m", messages=QUESTION, max_tokens=4)
    assert after.choices[0].message.content is not None


def test_a_full_queue_answers_429_with_retry_after(serve) -> None:
    with serve(queue_size=1) as s:
        long = {"model": "m", "messages": QUESTION, "max_tokens": 1500, "stream": True, "speculative": {"depth": 0}}
        results: dict[str, int] = {}
        with (
            httpx.Client(timeout=120) as running,
            running.stream("POST", s.url + "/v1/chat/completions", json=long) as first,
        ):
            assert first.status_code == 200
            lines = first.iter_lines()  # kept: dropping the iterator closes the connection
            next(lines)  # running: the engine is busy

            def wait() -> None:
                with httpx.Client(timeout=120) as http:
                    results["queued"] = http.post(
                        s.url + "/v1/chat/completions", json={**long, "stream": False, "max_tokens": 2}
                    ).status_code

            waiting = threading.Thread(target=wait)
            waiting.start()
            wait_until(lambda: s.host.waiting == 1, "the second request to wait in the queue")
            with pytest.raises(openai.RateLimitError) as caught:
                client(s).chat.completions.create(model="m", messages=QUESTION, max_tokens=2)
            assert caught.value.status_code == 429 and error_body(caught.value)["code"] == "queue_full"
            assert int(caught.value.response.headers["retry-after"]) >= 1
        waiting.join(timeout=300)
        assert results["queued"] == 200  # the waiting one was served once the first client left


def test_the_time_limit_ends_a_long_reply_with_length(serve) -> None:
    with serve(ServerConfig(time_limit=0.5)) as s:
        reply = client(s).chat.completions.create(
            model="m", messages=QUESTION, max_tokens=1500, extra_body={"speculative": {"depth": 0}}
        )
        assert reply.choices[0].finish_reason == "length"
        assert extra(reply)["speculative"]["stopped"] == "time_limit"
        assert usage_of(reply).completion_tokens < 1500
