"""``specchat serve --parallel N``: several requests decode together, each getting the reply it gets alone.

A real server on 127.0.0.1 over the demo pair, real ``openai`` clients on
threads. Each client's tokens come from the fates extension, so a difference
from decoding alone can be told from a float tie (support/identity.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
from openai.types.chat import ChatCompletionMessageParam

from specchat.core.llama.model import Model
from specchat.core.runtime.batched import BatchedRuntime
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import FinishReason, SamplerParams
from specchat.server.app import ServerConfig, build_app
from specchat.server.batch_queue import BatchedRequestQueue
from specchat.server.request_queue import RequestQueue
from specchat.server.runner import ServerThread
from support.api_clients import client, extra
from support.identity import assert_same_or_tie, plain_greedy

QUESTIONS = [
    "Write two sentences about rivers.",
    "List three colours and say why you like each.",
    "Repeat after me: the cat sat on the mat, the cat sat on the mat.",
    "Explain what a bicycle is to a child.",
]
MAX_TOKENS = 40


@dataclass
class Batched:
    url: str
    host: BatchedRequestQueue

    @property
    def base_url(self) -> str:
        return self.url + "/v1"


@contextmanager
def batched_server(runtime: Any, parallel: int = 4, queue_size: int = 8) -> Iterator[Batched]:
    batch = BatchedRuntime(runtime, parallel)
    host = BatchedRequestQueue(batch, queue_size=queue_size)
    thread = ServerThread(build_app(host, ServerConfig())).start()
    try:
        yield Batched(thread.url, host)
    finally:
        thread.stop()
        host.close()
        batch.close()


def stream(
    served: Any, question: str, drafter: str | None = None, depth: int | None = None, sources: set[str] | None = None
) -> tuple[list[int], str]:
    """One streamed greedy reply: its token ids (the fates extension) and its text; ``sources`` collects who
    drafted its accepted tokens."""
    spec: dict[str, Any] = {"fates": True}
    if drafter is not None:
        spec["drafter"] = drafter
    if depth is not None:
        spec["depth"] = depth
    chunks = list(
        client(served).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": question}],
            max_tokens=MAX_TOKENS,
            temperature=0,
            stream=True,
            extra_body={"speculative": spec},
        )
    )
    fates = [f for c in chunks if c.choices for f in extra(c.choices[0]).get("specchat_fates") or []]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    if sources is not None:
        sources.update(f["source"] for f in fates if f["fate"] == "accepted")
    return [f["token"] for f in fates if f["fate"] != "rejected"], text


def at_once(served: Any, questions: list[str], drafters: list[str | None]) -> list[tuple[list[int], str]]:
    results: dict[int, tuple[list[int], str]] = {}
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            results[i] = stream(served, questions[i], drafters[i])
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(questions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    return [results[i] for i in range(len(questions))]


def check_against_alone(runtime: Any, question: str, got: list[int], alone: tuple[list[int], str], text: str) -> None:
    prompt = runtime.prompt([{"role": "user", "content": question}]).tokens
    if got == alone[0]:
        assert text == alone[1]
        return
    plain = plain_greedy(runtime.target_context, prompt, MAX_TOKENS, SamplerParams(), runtime.target.eog_tokens)
    assert_same_or_tie(runtime.target_context, prompt, plain, got, label=f"batched: {question}")
    assert_same_or_tie(runtime.target_context, prompt, plain, alone[0], label=f"alone: {question}")


def test_four_clients_at_once_get_what_each_gets_alone(serve, demo_runtime) -> None:
    with serve() as single:  # --parallel 1: today's path, one request at a time
        alone = [stream(single, q, "ngram") for q in QUESTIONS]
    with batched_server(demo_runtime) as served:
        together = at_once(served, QUESTIONS, [None] * len(QUESTIONS))
        records = list(served.host.served)
        health = httpx.get(served.url + "/health").json()
        widest = served.host.batch.engine.widest
    assert widest >= 2  # the clients shared rounds
    for question, (tokens, text), ref in zip(QUESTIONS, together, alone, strict=True):
        assert len(tokens) == MAX_TOKENS or tokens[-1] in demo_runtime.target.eog_tokens
        check_against_alone(demo_runtime, question, tokens, ref, text)
    assert len(records) == 4 and all(r.reason in (FinishReason.MAX_TOKENS, FinishReason.EOS) for r in records)
    assert health["busy"] is False and health["waiting"] == 0


def test_a_client_that_leaves_mid_stream_does_not_disturb_the_others(serve, demo_runtime) -> None:
    with serve() as single:
        alone = [stream(single, q, "ngram") for q in QUESTIONS[:3]]
    with batched_server(demo_runtime) as served:
        left = threading.Event()

        def leave() -> None:
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}],
                "max_tokens": 400,
                "temperature": 0,
                "stream": True,
            }
            with (
                httpx.Client(timeout=120) as http,
                http.stream("POST", served.url + "/v1/chat/completions", json=body) as answer,
            ):
                assert answer.status_code == 200
                seen = 0
                for line in answer.iter_lines():
                    if '"content": "' in line:
                        seen += 1
                    if seen >= 3:
                        break  # closes the connection mid-stream
            left.set()

        leaver = threading.Thread(target=leave)
        leaver.start()
        together = at_once(served, QUESTIONS[:3], [None, None, None])
        leaver.join(timeout=120)
        assert left.is_set()
        deadline = time.monotonic() + 60
        while served.host.busy:  # the leaver's sequence ends at the next round
            assert time.monotonic() < deadline, "the abandoned request kept running"
            time.sleep(0.05)
        records = list(served.host.served)
    cancelled = [r for r in records if r.reason is FinishReason.CANCELLED]
    assert len(cancelled) == 1 and cancelled[0].generated < 400
    for question, (tokens, text), ref in zip(QUESTIONS[:3], together, alone, strict=True):
        check_against_alone(demo_runtime, question, tokens, ref, text)


def test_requests_for_the_draft_model_join_the_batch_and_share_its_draft_decodes(serve, demo_runtime) -> None:
    with serve() as single:
        alone = [stream(single, q, d) for q, d in zip(QUESTIONS[:3], ["draft", "draft", "ngram"], strict=True)]
    with batched_server(demo_runtime, parallel=3) as served:
        model = served.host.batch.draft_model
        assert model is not None and served.host.batch.batchable("draft")
        sources: list[set[str]] = [set(), set(), set()]
        together: dict[int, tuple[list[int], str]] = {}
        go = threading.Barrier(3)

        def one(i: int, drafter: str | None) -> None:
            go.wait()
            together[i] = stream(served, QUESTIONS[i], drafter, depth=3 if drafter else None, sources=sources[i])

        threads = [threading.Thread(target=one, args=(i, d)) for i, d in enumerate(["draft", "draft", None])]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        records = list(served.host.served)
        ran_alone, widest = served.host.ran_alone, served.host.batch.engine.widest
    assert ran_alone == 0 and len(records) == 3  # nobody ran beside the batch: the draft model's requests were in it
    assert widest >= 2 and model.widest >= 2 and model.shared_decodes > 0  # one draft decode for both at once
    assert "model" in sources[0] and "model" in sources[1]  # the model's drafts were kept in each
    for i, question in enumerate(QUESTIONS[:3]):
        tokens, text = together[i]
        check_against_alone(demo_runtime, question, tokens, alone[i], text)


def test_a_request_with_a_prediction_runs_alone_and_drafts_from_it(serve, demo_runtime) -> None:
    # Its answer is in the prediction and not in the prompt, so only the prediction can draft it.
    edit: list[ChatCompletionMessageParam] = [{"role": "user", "content": QUESTIONS[3]}]
    with serve() as single:
        plain = client(single).chat.completions.create(model="m", messages=edit, max_tokens=MAX_TOKENS, temperature=0)
    text = plain.choices[0].message.content
    assert text
    with batched_server(demo_runtime, parallel=2) as served:
        answers: list[Any] = []
        side = threading.Thread(target=lambda: answers.append(stream(served, QUESTIONS[0])))
        side.start()
        right = client(served).chat.completions.create(
            model="m",
            messages=edit,
            max_tokens=MAX_TOKENS,
            temperature=0,
            prediction={"type": "content", "content": text},
        )
        side.join(timeout=300)
        records = list(served.host.served)
        ran_alone = served.host.ran_alone
    assert right.choices[0].message.content == text  # the batch does not draft from outside texts: run alone
    assert ran_alone == 1
    assert right.usage is not None
    details = right.usage.completion_tokens_details
    assert details is not None and (details.accepted_prediction_tokens or 0) > 0
    assert [r.prediction for r in records if r.prediction is not None] == [
        (details.accepted_prediction_tokens, details.rejected_prediction_tokens)
    ]
    assert len(answers) == 1 and answers[0][0]  # the request beside it was served too


def test_two_streams_at_once_on_a_hybrid_target_each_get_what_they_get_alone() -> None:
    hybrid = Path(__file__).resolve().parent.parent / "models" / "qwen35.gguf"  # attention + Gated DeltaNet
    runtime = Runtime(Model(hybrid), None, n_ctx=256, n_threads=1)
    questions = ["Tell me about the sea.", "Why is the sky blue? Explain it to a child."]
    try:
        single = RequestQueue(runtime)  # --parallel 1: each reply alone on the runtime's own context
        thread = ServerThread(build_app(single, ServerConfig())).start()
        try:
            alone = [stream(SimpleNamespace(base_url=f"{thread.url}/v1"), q, "ngram") for q in questions]
        finally:
            thread.stop()
            single.close()
        with batched_server(runtime, parallel=2) as served:
            together = at_once(served, questions, ["ngram", "ngram"])
            batch = served.host.batch
            widest = batch.engine.widest
            cuts = sum(s.in_place + s.restores for s in batch.contexts.stats)
        assert widest == 2  # the two streams shared rounds
        assert cuts > 0  # lookup's rejected drafts were taken back inside the shared batch
        for question, (tokens, text), ref in zip(questions, together, alone, strict=True):
            assert len(tokens) == MAX_TOKENS
            check_against_alone(runtime, question, tokens, ref, text)
    finally:
        runtime.close()


def test_parallel_out_of_range_is_refused_in_one_line() -> None:
    for args, expected in ((["--target", "x.gguf", "--parallel", "0"], "--parallel must be 1-64"),):
        out = subprocess.run(
            [sys.executable, "-m", "specchat", "serve", "--port", "0", *args],
            capture_output=True,
            text=True,
            env={**os.environ},
            timeout=300,
        )
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and expected in lines[0], out.stderr
        assert lines[0].startswith("specchat: error: ")


def test_a_burst_beyond_the_running_and_the_queue_gets_429_and_the_rest_complete(demo_runtime) -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}],
        "max_tokens": 48,
        "temperature": 0,
    }
    answers: list[httpx.Response] = []
    lock = threading.Lock()
    go = threading.Event()

    def post(url: str) -> None:
        with httpx.Client(timeout=300) as http:
            go.wait()
            answer = http.post(url + "/v1/chat/completions", json=body)
            with lock:
                answers.append(answer)

    with batched_server(demo_runtime, parallel=2, queue_size=2) as served:
        threads = [threading.Thread(target=post, args=(served.url,)) for _ in range(12)]
        for t in threads:
            t.start()
        go.set()
        for t in threads:
            t.join(timeout=300)
        health = httpx.get(served.url + "/health").json()
    busy = [a for a in answers if a.status_code == 429]
    done = [a for a in answers if a.status_code == 200]
    assert len(answers) == 12 and len(busy) + len(done) == 12, [a.status_code for a in answers]
    assert busy and all(a.headers["Retry-After"].isdigit() and a.json()["error"]["code"] == "queue_full" for a in busy)
    texts = {a.json()["choices"][0]["message"]["content"] for a in done}
    assert len(done) >= 3 and len(texts) == 1  # the same greedy reply, however the requests were batched
    assert health == {"status": "ok", "busy": False, "waiting": 0}


def test_sigterm_with_eight_streams_ends_each_cleanly_and_exits_0(demo_pair) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specchat",
            "serve",
            "--target",
            str(demo_pair.target),
            "--port",
            "0",
            "--ctx",
            "1024",
            "--parallel",
            "4",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ},
    )
    assert proc.stderr is not None
    url = None
    for line in proc.stderr:
        if "specchat serve: http" in line:
            url = line.split()[2].removesuffix("/v1")
            break
    assert url is not None
    body = {"model": "m", "messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 900}
    results: dict[int, tuple[int, list[str]]] = {}
    reading = threading.Event()

    def stream_to_its_end(i: int) -> None:
        with (
            httpx.Client(timeout=120) as http,
            http.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True}) as answer,
        ):
            if answer.status_code != 200:
                results[i] = (answer.status_code, [answer.read().decode()])
                return
            events = []
            for line in answer.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    if '"content": "' in line and '"content": ""' not in line:
                        reading.set()
            results[i] = (200, events)

    clients = [threading.Thread(target=stream_to_its_end, args=(i,)) for i in range(8)]
    try:
        for c in clients:
            c.start()
        assert reading.wait(timeout=120), "no stream began"
        deadline = time.monotonic() + 120
        while httpx.get(url + "/health").json()["waiting"] < 4:  # four decode, four wait
            assert time.monotonic() < deadline, "the other four never queued"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        for c in clients:
            c.join(timeout=120)
        rest = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert proc.returncode == 0 and "Traceback" not in rest, rest
    assert sorted(results) == list(range(8))
    streamed = [events for status, events in results.values() if status == 200]
    refused = [status for status, _ in results.values() if status == 503]
    assert len(streamed) == 4 and len(refused) == 4, results
    for events in streamed:  # each running stream: an error event naming the stop, then [DONE]
        assert events[-1] == "[DONE]" and '"server_shutting_down"' in events[-2], events[-3:]


def test_a_prompt_that_does_not_fit_is_refused_and_the_running_reply_goes_on(serve, demo_runtime) -> None:
    with serve() as single:
        alone = stream(single, QUESTIONS[0], "ngram")
    with batched_server(demo_runtime, parallel=2) as served:
        result: dict[str, tuple[list[int], str]] = {}
        runner = threading.Thread(target=lambda: result.setdefault("r", stream(served, QUESTIONS[0])))
        runner.start()
        long = {
            "model": "m",
            "messages": [{"role": "user", "content": "word " * 5000}],
            "max_tokens": 8,
        }
        refused = httpx.post(served.url + "/v1/chat/completions", json=long, timeout=120)
        runner.join(timeout=300)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
    tokens, text = result["r"]
    check_against_alone(demo_runtime, QUESTIONS[0], tokens, alone, text)
