"""OpenAI's predicted outputs (``prediction``) through the official ``openai`` client and raw HTTP, on 127.0.0.1
with the demo pair: drafted from by lookup, the answer unchanged, its acceptance in ``usage``, named in the fates,
and every bad value a 400 naming its field."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionPredictionContentParam

from specchat.core.types import PREDICTION_NAME
from specchat.server.app import ServerConfig
from specchat.server.protocol import MAX_PREDICTION_BYTES, MAX_PREDICTION_PARTS
from support.api_clients import client, extra, usage_of

CODE = (
    "def area(width, height):\n    return width * height\n\n\n"
    "def perimeter(width, height):\n    return 2 * (width + height)\n"
)
EDIT: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": f"Rename width to w in this code. Reply with the code only.\n\n{CODE}"}
]
CHAT = "/v1/chat/completions"


def predicted(text: str) -> ChatCompletionPredictionContentParam:
    return {"type": "content", "content": text}


def accepted_prediction(reply: Any) -> int:
    """The prediction tokens ``reply`` accepted (``usage.completion_tokens_details``), which it must report."""
    details = usage_of(reply).completion_tokens_details
    assert details is not None and details.accepted_prediction_tokens is not None, reply
    return details.accepted_prediction_tokens


def test_a_prediction_is_drafted_from_the_answer_unchanged_and_its_acceptance_in_usage(served) -> None:
    api = client(served)
    plain = api.chat.completions.create(model="m", messages=EDIT, max_tokens=64, temperature=0)
    assert usage_of(plain).completion_tokens_details is None  # no prediction: no prediction figures
    text = plain.choices[0].message.content
    assert text
    right = api.chat.completions.create(
        model="m", messages=EDIT, max_tokens=64, temperature=0, prediction=predicted(text)
    )
    assert right.choices[0].message.content == text
    details = usage_of(right).completion_tokens_details
    assert details is not None and details.accepted_prediction_tokens is not None
    assert details.accepted_prediction_tokens >= usage_of(right).completion_tokens // 2  # most of it came from it
    assert details.rejected_prediction_tokens is not None and details.rejected_prediction_tokens >= 0
    by_source = extra(right)["speculative"]["by_source"]
    assert by_source["lookup"]["accepted"] >= details.accepted_prediction_tokens
    # The file before its edit, as an editor sends it: the answer stands. Whether Automatic drafts from it is its
    # choice per round, timed; lookup at a fixed depth (fixed choices) drafts from it where the reply copies it.
    # At auto depth the rounds' bounds follow the timings too, and with them whether the code's first tokens come
    # from the prediction or from the prompt's copy resumed after the reply's fence (the conversation's): one CI
    # run credited none of them to the prediction. At depths 2-8 it credits 2-6, the same every time.
    before = api.chat.completions.create(
        model="m", messages=EDIT, max_tokens=64, temperature=0, prediction=predicted(CODE)
    )
    assert before.choices[0].message.content == text
    by_lookup = api.chat.completions.create(
        model="m",
        messages=EDIT,
        max_tokens=64,
        temperature=0,
        prediction=predicted(CODE),
        extra_body={"speculative": {"drafter": "ngram", "depth": 4}},
    )
    assert by_lookup.choices[0].message.content == text
    assert accepted_prediction(by_lookup) > 0
    unrelated = api.chat.completions.create(
        model="m",
        messages=EDIT,
        max_tokens=64,
        temperature=0,
        prediction={
            "type": "content",
            "content": [{"type": "text", "text": "The weather "}, {"type": "text", "text": "is mild."}],
        },
    )
    assert unrelated.choices[0].message.content == text


def test_streamed_the_usage_chunk_counts_the_prediction_and_the_fates_name_it(served) -> None:
    api = client(served)
    whole = api.chat.completions.create(model="m", messages=EDIT, max_tokens=48, temperature=0)
    text = whole.choices[0].message.content
    assert text is not None
    chunks = list(
        api.chat.completions.create(
            model="m",
            messages=EDIT,
            max_tokens=48,
            temperature=0,
            prediction=predicted(text),
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"speculative": {"fates": True}},
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text
    usage = chunks[-1].usage
    assert usage is not None and not chunks[-1].choices
    details = usage.completion_tokens_details
    assert details is not None
    fates = [f for c in chunks if c.choices for f in (c.choices[0].model_extra or {}).get("specchat_fates") or []]
    from_prediction = [f for f in fates if f.get("origin") == PREDICTION_NAME]
    assert from_prediction and all(f["source"] == "lookup" for f in from_prediction)
    assert details.accepted_prediction_tokens == sum(1 for f in from_prediction if f["fate"] == "accepted") > 0
    assert details.rejected_prediction_tokens == sum(1 for f in from_prediction if f["fate"] == "rejected")


def test_completions_take_a_prediction_too(served) -> None:
    api = client(served)
    prompt = "The days of the week are Monday, Tuesday,"
    plain = api.completions.create(model="m", prompt=prompt, max_tokens=24, temperature=0)
    text = plain.choices[0].text
    answer = api.completions.create(
        model="m",
        prompt=prompt,
        max_tokens=24,
        temperature=0,
        extra_body={"prediction": {"type": "content", "content": [{"type": "text", "text": text}]}},
    )
    assert answer.choices[0].text == text
    assert accepted_prediction(answer) > 0


def refused(served_url: str, prediction: Any, path: str = CHAT) -> dict[str, Any]:
    body = {"messages": EDIT, "max_tokens": 4, "prediction": prediction}
    if path != CHAT:
        body = {"prompt": "Hello", "max_tokens": 4, "prediction": prediction}
    answer = httpx.post(served_url + path, json=body, timeout=120)
    assert answer.status_code == 400, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    return error


@pytest.mark.parametrize(
    ("prediction", "param"),
    [
        ("just text", "prediction"),
        ({"type": "text", "content": "x"}, "prediction.type"),
        ({"content": "x"}, "prediction.type"),
        ({"type": "content", "content": 42}, "prediction.content"),
        ({"type": "content", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, "prediction.content[0]"),
        ({"type": "content", "content": [{"type": "text", "text": "a"}, {"type": "text"}]}, "prediction.content[1]"),
        ({"type": "content", "content": "x", "extra": 1}, "prediction.extra"),
    ],
)
def test_bad_predictions_are_400s_naming_the_field(served, prediction: Any, param: str) -> None:
    for path in (CHAT, "/v1/completions"):
        assert refused(served.url, prediction, path)["param"] == param


def test_a_prediction_of_100000_parts_is_refused(served) -> None:
    parts = [{"type": "text", "text": "a"}] * 100_000
    error = refused(served.url, {"type": "content", "content": parts})
    assert error["param"] == "prediction.content" and f"{MAX_PREDICTION_PARTS:,}" in error["message"]


def test_a_prediction_larger_than_the_body_limit_is_refused(serve) -> None:
    huge = "x" * (MAX_PREDICTION_BYTES + 1)
    with serve(ServerConfig(max_body_bytes=3 * MAX_PREDICTION_BYTES)) as s:  # a server that takes larger bodies
        error = refused(s.url, predicted(huge))
        assert error["param"] == "prediction.content" and "bytes" in error["message"]
        multi = [{"type": "text", "text": huge[: MAX_PREDICTION_BYTES // 2 + 1]}] * 2
        assert refused(s.url, {"type": "content", "content": multi})["param"] == "prediction.content"
    with serve() as s:  # the default limit: the body itself is refused
        body = json.dumps({"messages": EDIT, "prediction": predicted(huge)})
        answer = httpx.post(s.url + CHAT, content=body, headers={"content-type": "application/json"}, timeout=120)
        assert answer.status_code == 413 and answer.json()["error"]["code"] == "body_too_large"
