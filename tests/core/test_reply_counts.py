"""One record of a reply's counters: the engine's figures, the window's and bench's count the same way."""

from __future__ import annotations

import json
from dataclasses import fields

from specchat.cli.bench import BenchReport, RunFigures, Totals
from specchat.core.chat.transcript import ReplyFigures
from specchat.core.types import DraftSource, Finished, FinishReason, GenerationStats, ReplyCounts, Verified

# A finished reply's figures as an earlier specchat stored them (conversations.sqlite3, messages.stats).
STORED = json.loads("""{
 "rounds": 12, "drafted": 36, "accepted": 27, "generated": 40, "acceptance_rate": 0.75,
 "tokens_per_second": 20.0, "mean_accepted_per_round": 2.25, "prompt_tokens": 30, "reused_prompt_tokens": 10,
 "prompt_seconds": 0.5, "wall_seconds": 2.5, "depth": 4, "plain_tokens_per_second_estimate": 12.5,
 "plain_tokens_per_second": 11.0, "plain_tokens": 16, "passes": 13, "first_token_seconds": 0.25,
 "per_round": [[0, 3, 3], [1, 3, 2]], "positions": [[12, 10], [12, 9], [12, 8]],
 "by_source": {"lookup": {"drafted": 6, "accepted": 2}, "model": {"drafted": 30, "accepted": 25}},
 "timeline": [[0.1, 4, 12], [0.2, 3, 9]], "max_tokens": 512
}""")


def test_the_shared_counters_are_declared_once() -> None:
    shared = {f.name for f in fields(ReplyCounts)}
    assert {"rounds", "drafted", "accepted", "generated", "depth", "by_source"} <= shared
    for record in (GenerationStats, ReplyFigures):
        assert issubclass(record, ReplyCounts)
        assert not shared & set(record.__dict__.get("__annotations__", {})), record


def test_a_reply_stored_by_an_earlier_version_reads_back_whole() -> None:
    problems: list[str] = []
    figures = ReplyFigures.from_dict(STORED, problems)
    assert problems == []
    assert figures.as_dict() == STORED
    assert figures.final is not None and figures.final.rates_dict() == {
        "acceptance_rate": 0.75,
        "mean_accepted_per_round": 2.25,
    }


def test_the_window_and_the_engine_count_a_reply_alike() -> None:
    """Folding the events gives the engine's own counters; bench reports the same rates and sources."""
    events = [
        Verified(
            round=0,
            depth=3,
            accepted=(1, 2),
            rejected=(3,),
            correction=4,
            accepted_pieces=("a", "b"),
            rejected_pieces=("c",),
            correction_piece="d",
            target_probs=(0.9,) * 3,
            draft_probs=(0.8,) * 3,
            sources=(DraftSource.MODEL,) * 3,
        ),
        Verified(
            round=1,
            depth=2,
            accepted=(5,),
            rejected=(6,),
            correction=7,
            accepted_pieces=("e",),
            rejected_pieces=("f",),
            correction_piece="g",
            target_probs=(0.9,) * 2,
            draft_probs=(1.0,) * 2,
            sources=(DraftSource.LOOKUP,) * 2,
        ),
    ]
    engine = GenerationStats(depth=2, generated=5, generate_seconds=1.0)
    for event in events:
        engine.rounds += 1
        engine.drafted += len(event.accepted) + len(event.rejected)
        engine.accepted += len(event.accepted)
        for i, source in enumerate(event.sources):
            engine.count_source(source, 1, 1 if i < len(event.accepted) else 0)
    figures = ReplyFigures()
    figures.fold(events)
    shared = [f.name for f in fields(ReplyCounts)]
    assert [getattr(figures, name) for name in shared] == [getattr(engine, name) for name in shared]
    figures.fold([Finished(FinishReason.EOS, engine)])
    assert (
        figures.as_dict()["by_source"]
        == engine.source_dict()
        == {"lookup": {"drafted": 2, "accepted": 1}, "model": {"drafted": 3, "accepted": 2}}
    )
    report = BenchReport(depth="auto")
    totals = Totals()
    totals.add(
        RunFigures([], ReplyFigures(generated=5, final=GenerationStats(generated=5, generate_seconds=2.0))),
        RunFigures([], figures),
        native_tokens=0,
        native_seconds=0.0,
        predicted_rate=0.0,
    )
    totals.fill(report)
    assert (report.acceptance_rate, report.mean_accepted_per_round) == (0.6, 1.5)
    assert engine.rates_dict() == {"acceptance_rate": 0.6, "mean_accepted_per_round": 1.5}
