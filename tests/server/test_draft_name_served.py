"""A server whose ``--draft`` file is a head: requests and a ``--drafter`` naming ``"draft"`` (as clients written
against a draft-model server send) draft with the head's own drafter, and the reply names that drafter."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from specchat.core.engine.registry import head_drafter_name
from specchat.core.runtime.runtime import Runtime
from specchat.server.app import ServerConfig, build_app
from specchat.server.request_queue import RequestQueue
from specchat.server.runner import ServerThread
from support.api_clients import client, error_body, extra

MODELS = Path(__file__).resolve().parent.parent / "models"


@pytest.fixture(scope="module")
def head_runtime() -> Iterator[Runtime]:
    runtime = Runtime.load(MODELS / "llama.gguf", MODELS / "dflash-llama.gguf", n_ctx=256, n_threads=1)
    yield runtime
    runtime.close()


def heads_drafter(runtime: Runtime) -> str:
    assert runtime.draft_context is None and runtime.head_context is not None  # the --draft file is a head
    name = head_drafter_name(runtime.head_context.head_kind)
    assert name is not None and name != "draft"
    return name


class Served:
    def __init__(self, url: str) -> None:
        self.base_url = url + "/v1"


def test_a_request_naming_draft_drafts_with_the_loaded_head_and_says_so(head_runtime: Runtime) -> None:
    expected = heads_drafter(head_runtime)
    host = RequestQueue(head_runtime)
    thread = ServerThread(build_app(host, ServerConfig())).start()
    try:
        api = client(Served(thread.url))
        reply = api.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "Hi."}],
            max_tokens=6,
            temperature=0,
            extra_body={"speculative": {"drafter": "draft", "depth": 2}},
        )
        spec = extra(reply)["speculative"]
        assert spec["drafter"] == expected and spec["drafted"] > 0
        assert set(spec["by_source"]) == {expected}  # the head drafted every drafted token
        with pytest.raises(openai.BadRequestError) as caught:  # a head drafter the file is not: refused
            api.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "Hi."}],
                max_tokens=2,
                extra_body={"speculative": {"drafter": "eagle3" if expected != "eagle3" else "dspark"}},
            )
        assert error_body(caught.value)["param"] == "speculative.drafter"
    finally:
        thread.stop()
        host.close()


def test_a_server_started_with_drafter_draft_offers_the_heads_drafter_as_its_default(head_runtime: Runtime) -> None:
    host = RequestQueue(head_runtime, drafter="draft")
    try:
        assert host.default_drafter == host.info.default_drafter == heads_drafter(head_runtime)
    finally:
        host.close()
