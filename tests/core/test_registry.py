"""The drafter registry: what each drafter needs and can do, and a new entry reaching every front end by itself."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator

import pytest

from specchat.__main__ import build_parser
from specchat.cli.chat import drafter_from_args
from specchat.core.engine import registry
from specchat.core.engine.composite import CompositeDrafter
from specchat.core.engine.drafters import Draft, Drafter, DraftRequest
from specchat.core.engine.registry import (
    DRAFTERS,
    DrafterEntry,
    Part,
    Parts,
    available_drafters,
    default_drafter,
    drafter_entry,
    drafter_names,
    head_part,
    source_name,
)
from specchat.core.engine.sampling import Distribution
from specchat.core.head_formats import head_formats
from specchat.core.settings import load_settings, save_settings, settings_path
from specchat.core.types import DrafterKind, DraftSource, Finished, GenerationParams, SpecchatError, Verified

DRAFT, MTP = Part.DRAFT_MODEL.value, Part.MTP_HEADS.value


PAIRS = [set(), {DRAFT}, {MTP}, {DRAFT, MTP}, *({head_part(f.kind)} for f in head_formats() if f.drafter)]


@pytest.mark.parametrize("offered", PAIRS, ids=lambda o: "+".join(sorted(o)) or "target alone")
def test_what_each_pair_can_draft_with(offered: set[str]) -> None:
    """Read from the registry: a pair runs each entry that needs nothing or one of its parts, in list order, and
    defaults to the first that drafts; nothing it lacks is offered."""
    names = [e.name for e in available_drafters(offered)]
    assert names == [e.name for e in DRAFTERS if not e.parts or set(e.parts) & offered]
    assert all(e.name not in names for e in DRAFTERS if e.parts and not set(e.parts) & offered)
    assert DrafterKind.NONE in names and DrafterKind.NGRAM in names  # the target alone can always do these
    default = default_drafter(offered)
    assert default.drafts and default.name == next(n for n in names if drafter_entry(n).drafts)
    # Whatever the pair offers beside the target, the automatic drafter takes it and is the default.
    assert (default.name is DrafterKind.COMPOSITE) == bool(offered)


def test_the_automatic_drafter_is_named_after_what_it_drafts_with() -> None:
    composite = drafter_entry(DrafterKind.COMPOSITE)
    assert composite.label_for({DRAFT, MTP}) == "Automatic (lookup + draft model)"
    assert composite.label_for({MTP}) == "Automatic (lookup + MTP heads)"
    for form in head_formats():
        if form.drafter:
            assert composite.label_for({head_part(form.kind)}) == f"Automatic (lookup + {form.label})"
    assert composite.lacking() == "draft model or MTP heads or drafter head"
    assert not drafter_entry(DrafterKind.NGRAM).samples and not drafter_entry(DrafterKind.NONE).samples
    assert composite.keep and composite.samples
    assert Parts().offered() == frozenset() and Parts(mtp=object()).offered() == {MTP}  # type: ignore[arg-type]


def test_names_look_up_as_text_or_kind_and_an_unknown_one_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert drafter_entry("ngram") is drafter_entry(DrafterKind.NGRAM)
    assert drafter_entry("ngram").name is DrafterKind.NGRAM and type(drafter_entry("ngram").key) is str
    every = ", ".join(drafter_names())
    with pytest.raises(SpecchatError, match=f"no drafter called 'psychic'; choose one of {every}$") as err:
        drafter_entry("psychic")
    assert "\n" not in str(err.value)
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["chat", "--target", "t.gguf", "--drafter", "psychic", "hello"])
    said = capsys.readouterr().err
    assert exit_.value.code == 2 and said.count("\n") == 1 and "invalid choice: 'psychic'" in said
    args = build_parser().parse_args(["chat", "--target", "t.gguf", "--drafter", "mtp", "--ngram", "hello"])
    with pytest.raises(SpecchatError, match="without --ngram"):
        drafter_from_args(args)


class EchoDrafter(Drafter):
    """Proposes the last committed token again, k times (a drafter made up for this test)."""

    kind = "echo"
    source = DraftSource("echo")  # its own source, declared here: nothing in core/types.py

    def draft(self, request: DraftRequest) -> Draft:
        last = int(request.tokens[-1])
        return Draft(tokens=[last] * request.k, q=[Distribution.one_hot(last)] * request.k, probs=[1.0] * request.k)


ECHO = DrafterEntry("echo", "Echo (the last token again)", lambda parts: EchoDrafter(), samples=False)


@pytest.fixture
def with_echo(monkeypatch: pytest.MonkeyPatch) -> Iterator[DrafterEntry]:
    """The registry with one more entry, as a new drafter's own line in it adds one (nothing else changes)."""
    monkeypatch.setattr(registry, "DRAFTERS", (*registry.DRAFTERS, ECHO))
    yield ECHO


def test_a_new_entry_reaches_the_settings_the_terminal_and_the_runtime(with_echo: DrafterEntry, demo_runtime) -> None:
    assert drafter_names()[-1] == "echo"
    settings_path().parent.mkdir(parents=True, exist_ok=True)
    settings_path().write_text(json.dumps({"drafter": "echo"}), encoding="utf-8")
    settings = load_settings()
    assert settings.drafter == "echo"
    save_settings(settings)
    assert json.loads(settings_path().read_text(encoding="utf-8"))["drafter"] == "echo"

    args = build_parser().parse_args(["chat", "--target", "t.gguf", "--drafter", "echo", "hello"])
    assert drafter_from_args(args) == "echo"
    assert "echo" in [e.name for e in demo_runtime.drafters()]  # it needs nothing the pair lacks

    params = GenerationParams(max_tokens=24)
    events = list(demo_runtime.reply([{"role": "user", "content": "Say 'no no no no no'."}], params, drafter="echo"))
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.stats.generated > 0, finished
    assert finished.stats.drafted > 0 and any(isinstance(e, Verified) and e.accepted + e.rejected for e in events)
    sources = {s for e in events if isinstance(e, Verified) for s in e.sources}
    assert sources == {DraftSource("echo")} and next(iter(sources)) is EchoDrafter.source
    assert finished.stats.by_source and set(finished.stats.by_source) == {"echo"}
    assert source_name(EchoDrafter.source) == "Echo (the last token again)"  # the stats panel's and X-ray's name
    assert demo_runtime.adaptive_for("echo") is demo_runtime.adaptive_for("echo")  # its own auto-depth controller


def test_a_reply_without_a_drafter_named_drafts_with_the_best_the_pair_allows(demo_runtime) -> None:
    assert default_drafter(demo_runtime.offered).name is DrafterKind.COMPOSITE  # the demo pair has a draft model
    composite = demo_runtime.drafter_for(DrafterKind.COMPOSITE)  # kept between replies, with what it learned
    assert isinstance(composite, CompositeDrafter)
    rounds = sum(composite.wins.values())
    events = list(demo_runtime.reply([{"role": "user", "content": "Count to five."}], GenerationParams(max_tokens=16)))
    assert isinstance(events[-1], Finished) and events[-1].stats.generated > 0
    assert sum(composite.wins.values()) > rounds  # the composite chose this reply's rounds
    with pytest.raises(SpecchatError, match="no messages"):
        demo_runtime.reply([], GenerationParams())


def test_the_terminal_lists_drafters_by_their_plain_names() -> None:
    """``--help`` and argparse's error line name the drafters as typed, not as enum members."""
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for command in ("chat", "serve"):
        sub = commands.choices[command]
        usage = sub.format_help()
        assert "{" + ",".join(drafter_names()) + "}" in usage
        assert "DrafterKind" not in usage
    assert all(type(name) is str for name in drafter_names())


def test_a_drafter_names_its_own_source_once_and_odd_names_are_refused() -> None:
    made = DraftSource("test_only_source")
    assert made is DraftSource("test_only_source") and made.value == "test_only_source" and made == "test_only_source"
    assert DraftSource("lookup") is DraftSource.LOOKUP
    assert made not in list(DraftSource)  # the built-in members stay the ones listed
    for odd in ("Echo", "two words", "", "1st"):
        with pytest.raises(ValueError):
            DraftSource(odd)
