"""A reply's text when a stop string is split across rounds (the engine cuts only the round that completes it)."""

from __future__ import annotations

from specchat.core.types import DrafterKind, Finished, FinishReason, GenerationParams, GenerationStats, Verified
from specchat.server.protocol import Request
from specchat.server.replies import Reply
from specchat.server.request_queue import PairInfo, Started


def verified(text: str, n: int) -> Verified:
    return Verified(
        round=n,
        depth=0,
        accepted=(),
        rejected=(),
        correction=n,
        accepted_pieces=(),
        rejected_pieces=(),
        correction_piece=text,
        target_probs=(),
        draft_probs=(),
    )


def test_a_stop_string_begun_in_an_earlier_round_is_cut_from_the_reply_and_never_streamed() -> None:
    request = Request("chat", GenerationParams(stop_strings=("is a",)), stream=True)
    info = PairInfo("m", "t.gguf", None, False, 2048, DrafterKind.NGRAM, ("CPU", None))
    reply = Reply(request, info, Started(5, DrafterKind.NGRAM, 0.0))
    sent = reply.add(verified("A bicycle ", 0)) + reply.add(verified("is", 1))
    sent += reply.add(verified("", 2))  # the round that completed "is a": the engine cut its " a"
    sent += reply.finish(Finished(FinishReason.STOP_STRING, GenerationStats(generated=3)))
    assert sent == "A bicycle " and reply.content == "A bicycle "
    assert reply.finish_reason(timed_out=False) == "stop"
