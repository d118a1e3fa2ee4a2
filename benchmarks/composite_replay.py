"""Drafting policies replayed on recorded replies with fixed costs: a comparison without timing noise.

On this 2-core host the same drafter's speed-up on one prompt moves by 10-15%
between runs, more than the margins the composite's goals ask about. Here each
prompt's greedy reply is decoded once by the target; then every drafter runs
its own rounds against that reply with the real draft model (so its drafts,
confidences and the rounds' shapes are real) while time comes from a fixed
cost model: a verify pass of n tokens costs ``verify + slope * (n - 1)``, the
draft model's first draft ``fixed``, each further one ``step``, each token it
catches up on after sitting out ``catch_up``. The defaults are this host's
figures for the demo pair (milliseconds). The drafters see only those
timings, so a replay is deterministic, and a change to a policy shows as a
change in its modelled tokens per second, prompt by prompt. ``--noise S``
blurs the timings the drafters learn from (each by a log-normal factor of
spread S, seeded) while the seconds counted stay the cost model's: how much a
policy's choices suffer from timings as noisy as a busy host's. ``--stalls P``
makes each draft model call and verify pass, with probability P, take
``--stall-factor`` times as long, counted and seen alike (a busy host's
scheduler taking a core away for a time slice): how well a policy rides out a
stall it cannot foresee. ``--seeds N`` replays N times with other noise or
stalls and prints each prompt's mean share. ``--orders`` gives each seed after
the first its own order of the prompts (seeded): the composite learns across
replies, so which reply comes first, or when a retry falls due, moves a
prompt's figure by tens of points; a policy should win in most orders.
``--warm ID`` has every drafter first write the reply to one prompt of
``tests/data/prompts.jsonl``, not counted: a server that served a request
before, its model timed and its acceptance counted.

``--ablate PART`` replays the composite with one of its parts switched off
(see ``ABLATIONS``): where the figures do not move, the part adds nothing. ``--read-at R`` has the
model read the prompt at a fixed round of every reply instead of by the composite's rule: what the read's
timing alone can reach.

    python benchmarks/composite_replay.py [--prompts FILE ...] [--max-tokens N] [--verify MS] [--slope MS]
        [--batch MS] [--fixed MS] [--step MS] [--catch-up MS] [--noise S] [--stalls P [--stall-factor X]]
        [--seeds N] [--orders] [--warm ID] [--trace ID ...] [--ablate PART ...] [--read-at R]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specchat.cli.bench import load_prompts, run_once
from specchat.core.cancel import CancelToken
from specchat.core.engine.composite import CompositeDrafter, Confidence, tuning
from specchat.core.engine.composite import drafter as composite_drafter
from specchat.core.engine.composite.pricing import Candidate, Costs, choose
from specchat.core.engine.depth import AdaptiveDepth
from specchat.core.engine.drafters import Draft, Drafter, DraftModelDrafter, DraftRequest, NgramDrafter
from specchat.core.engine.lookup import Found
from specchat.core.engine.speculative import _cut_after_end, _label_sources
from specchat.core.models.demo import provision_demo_pair
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import DrafterKind, GenerationParams

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "prompts"
DEFAULT_PROMPTS = [SHARED / "mixed-public.jsonl", SHARED / "public.jsonl", ROOT / "benchmarks/prompts/open-chat.jsonl"]
KINDS = (DrafterKind.NGRAM, DrafterKind.DRAFT_MODEL, DrafterKind.COMPOSITE)
LOOKUP_STEP = 1e-5  # seconds per proposed token of the lookup drafter (measured: about this)
NAMES = {DrafterKind.NGRAM: "lookup", DrafterKind.DRAFT_MODEL: "model", DrafterKind.COMPOSITE: "composite"}


def _no_first_probe() -> None:
    prefill = CompositeDrafter.prefill

    def without(self: CompositeDrafter, tokens: Sequence[int]) -> None:
        prefill(self, tokens)
        self._first_round = False

    CompositeDrafter.prefill = without  # type: ignore[method-assign]


def _read_at(at: int) -> None:
    """Every reply's model reads the prompt at the reply's ``at``-th round or later, as the composite then decides
    (0: never); the composite's own rule of when to read, and a try's read, switched off."""
    tuning.READ_RETRY_REPLIES = 10**9
    rounds: dict[int, int] = {}
    prefill = CompositeDrafter.prefill

    def counted(self: CompositeDrafter, tokens: Sequence[int]) -> None:
        prefill(self, tokens)
        rounds[id(self)] = 0

    def without_read(
        self: CompositeDrafter, request: DraftRequest, lookups: Sequence[Found], costs: Costs
    ) -> Candidate | None:
        if not self._unread_tokens():
            return None
        rounds[id(self)] += 1
        if at == 0 or rounds[id(self)] < at:
            return choose(lookups, request.k, self.table, costs, None)
        return None

    CompositeDrafter.prefill = counted  # type: ignore[method-assign]
    CompositeDrafter._without_read = without_read  # type: ignore[method-assign]


# Parts of the composite a replay can switch off, each by what it does.
ABLATIONS: dict[str, tuple[str, Callable[[], None]]] = {
    "probes": (
        "no probe of the model every PROBE_EVERY rounds without it",
        lambda: setattr(tuning, "PROBE_EVERY", 10**9),
    ),
    "first-probe": ("no probe in a reply's first round without a lookup", _no_first_probe),
    "unmeasured-tries": (
        "no forced model rounds before its costs are measured",
        lambda: setattr(tuning, "UNMEASURED_TRIES", 0),
    ),
    "handover": (
        "the model never hands a round over to a lookup mid-draft",
        lambda: setattr(tuning, "MIN_HANDOVER_MATCH", 10**9),
    ),
    "lookup-after-model": (
        "no lookup appended after the model's drafts",
        lambda: setattr(CompositeDrafter, "_lookup_after_model", lambda *_: None),
    ),
    "confidence": (
        "a model draft's probability says nothing (its position's rate alone)",
        lambda: setattr(Confidence, "rate", lambda _self, _p, rate, _avg: rate),
    ),
    "read-untimed": (
        "a model never timed waits to read the prompt as a timed one would",
        lambda: setattr(tuning, "READ_UNTIMED", False),
    ),
    "read-margin": (
        "the model reads the prompt as soon as its expected saving covers the read (no rent-or-buy wait)",
        lambda: setattr(tuning, "READ_MARGIN", 1.0),
    ),
    "resume": (
        "no lookup resumes a copy an edit broke off",
        lambda: setattr(tuning, "RESUME_LOOK_BACK", 0),
    ),
    "guess": (
        "no guess of where a broken copy resumes before its next word comes",
        lambda: setattr(composite_drafter, "guess_resumed", lambda *_: []),
    ),
    "retries": (
        "no try of an arm not run for RETRY_EVERY rounds",
        lambda: setattr(tuning, "RETRY_EVERY", 10**9),
    ),
    "positions": ("acceptance not kept apart by draft position", lambda: setattr(tuning, "POSITIONS", 1)),
    "stop-plan": (
        "the model drafts to the round's depth: no stop after a hesitant draft",
        lambda: setattr(CompositeDrafter, "_stopper", lambda *_a, **_k: lambda _t, _p: True),
    ),
}


@dataclass(frozen=True)
class CostModel:
    """Seconds for the parts of a round (see the module docstring)."""

    verify: float
    slope: float
    fixed: float
    step: float
    catch_up: float
    batch: float = 0.0  # a batch of two or more tokens takes another path than a one-token pass: its extra cost
    read: float = 0.0  # each prompt token the draft model reads
    overhead: float = 0.0005
    noise: float = 0.0  # spread (log-normal sigma) of the timings the drafters see
    stall: float = 0.0  # the chance that a draft model call or a verify pass stalls
    stall_factor: float = 8.0  # how many times as long a stalled one takes
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(1))

    def stalled(self, seconds: float) -> float:
        """``seconds``, or :attr:`stall_factor` times as long where this call stalls (at the chance :attr:`stall`)."""
        if self.stall and self.rng.random() < self.stall:
            return seconds * self.stall_factor
        return seconds

    @property
    def stall_mean(self) -> float:
        """What stalls make a pass take on average, as a factor."""
        return 1.0 + self.stall * (self.stall_factor - 1.0)

    def seen(self, seconds: float) -> float:
        """``seconds`` as a drafter measures it (blurred by :attr:`noise`)."""
        return seconds * float(np.exp(self.rng.normal(0.0, self.noise))) if self.noise else seconds

    def verify_seconds(self, n: int) -> float:
        return self.verify + self.slope * (n - 1) + (self.batch if n > 1 else 0.0)


@dataclass
class Group:
    """Modelled seconds per drafter (None: plain decoding) of one prompt, or of several together."""

    seconds: dict[DrafterKind | None, float] = field(default_factory=dict)
    first: dict[DrafterKind | None, float] = field(default_factory=dict)  # summed seconds to the first token
    prompts: int = 0

    def add(self, other: Group) -> None:
        for kind, took in other.seconds.items():
            self.seconds[kind] = self.seconds.get(kind, 0.0) + took
        for kind, took in other.first.items():
            self.first[kind] = self.first.get(kind, 0.0) + took
        self.prompts += other.prompts

    def first_line(self) -> str:
        """The mean time to the first token (ms, the target's own prompt read left out) per drafter."""
        return (
            f"{'  first token, mean ms':<31}"
            + "".join(f"{1000 * self.first[k] / self.prompts:>11.1f}" for k in KINDS)
            + f"   plain {1000 * self.first[None] / self.prompts:.1f}"
        )

    def speedup(self, kind: DrafterKind) -> float:
        """``kind``'s speed-up over plain decoding."""
        return self.seconds[None] / self.seconds[kind]

    def share(self) -> float:
        """The composite's speed as a share of the better single drafter's."""
        return self.speedup(DrafterKind.COMPOSITE) / max(
            self.speedup(DrafterKind.NGRAM), self.speedup(DrafterKind.DRAFT_MODEL)
        )

    def line(self, label: str, tokens: int | None = None) -> str:
        """Speed-ups over plain decoding, and the composite's share of the better single drafter."""
        return (
            f"{label[:24]:<24}{'' if tokens is None else tokens:>7}"
            + "".join(f"{self.speedup(k):>10.2f}x" for k in KINDS)
            + f"{self.share():>7.0%}"
        )


class TimedContext:
    """The real draft context, with how far behind each sync found it kept for the timing."""

    def __init__(self, context: object) -> None:
        self._context = context
        self.last_catch_up = 0
        self.last_read = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._context, name)

    def sync(self, tokens: Sequence[int]) -> tuple[np.ndarray, int]:
        row, reused = self._context.sync(tokens)  # type: ignore[attr-defined]
        self.last_catch_up = len(tokens) - reused
        return row, reused

    def extend_to(self, tokens: Sequence[int]) -> int:
        reused = self._context.extend_to(tokens)  # type: ignore[attr-defined]
        self.last_read = len(tokens) - reused
        return int(reused)


class ModelledClock:
    """The replay's clock: the modelled seconds so far, which the composite times its rounds by."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ModelledDrafter(DraftModelDrafter):
    """The real draft model drafter, its timings replaced by the cost model's (the composite learns from them)."""

    def __init__(self, context: TimedContext, costs: CostModel, clock: ModelledClock) -> None:
        super().__init__(context)  # type: ignore[arg-type]
        self.timed, self.costs, self.clock = context, costs, clock
        self.seconds = 0.0  # modelled seconds drafted since last asked

    def _spend(self, seconds: float) -> None:
        self.seconds += seconds
        self.clock.now += seconds

    def prefill(self, tokens: Sequence[int]) -> None:
        super().prefill(tokens)
        read = self.costs.read * self.timed.last_read
        self._spend(read)
        self.read = (self.timed.last_read, self.costs.seen(read))

    def draft(self, request: DraftRequest) -> Draft:
        draft = super().draft(request)
        n, costs = len(draft.tokens), self.costs
        if n:
            sync = costs.stalled(costs.fixed + costs.catch_up * max(self.timed.last_catch_up - 1, 0))
            steps = costs.stalled(costs.step * (n - 1)) if n > 1 else 0.0
            draft.step_seconds = costs.seen(steps / (n - 1)) if n > 1 else None
            draft.sample_seconds = 0.0
            seen = costs.seen(sync)
            if draft.sync_seconds is not None:
                draft.sync_seconds = seen
            if draft.catch_up_seconds is not None:
                draft.catch_up_seconds = seen
            self._spend(sync + steps)
        return draft

    def time_step(self, tokens: Sequence[int]) -> float | None:
        if super().time_step(tokens) is None:
            return None
        step = self.costs.stalled(self.costs.step)
        self._spend(step)
        return self.costs.seen(step)

    def take_seconds(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds


def replay(
    drafter: Drafter,
    adaptive: AdaptiveDepth,
    model: ModelledDrafter,
    prompt: list[int],
    reply: list[int],
    eog: frozenset[int],
    params: GenerationParams,
    costs: CostModel,
    trace: list[str] | None = None,
) -> tuple[float, float]:
    """Seconds the drafter takes to write ``reply`` after ``prompt`` under ``costs``, and to its first token.

    The draft model's read of the prompt counts (``costs.read`` a token) when it happens: before the first
    round for the model drafter, when the composite first drafts with it. The target's read is every
    drafter's alike and left out. ``trace``: gets a line per round (each draft's source initial, then how
    many were accepted).
    """
    committed = list(prompt)
    drafter.prefill(committed[:-1])
    rng, cancel = np.random.default_rng(0), CancelToken()
    seconds, written, first = model.take_seconds(), 0, 0.0
    while written < len(reply):
        remaining = params.max_tokens - written  # as live: the token budget bounds a round, not the reply's end
        if not drafter.can_draft:
            k = 0
        elif drafter.own_depth:
            k = adaptive.max_depth if adaptive.costs.measured_plain() else 0
        else:
            k = adaptive.choose()
        k = max(0, min(k, remaining - 1))
        draft = Draft()
        draft_seconds = 0.0
        if k > 0:
            draft = drafter.draft(
                DraftRequest(
                    committed, k, params.sampler, rng, cancel, 0.0, False, adaptive.costs, eog=eog, remaining=remaining
                )
            )
            _label_sources(draft, drafter)
            _cut_after_end(draft, eog)
            if isinstance(drafter, NgramDrafter):
                draft.step_seconds = LOOKUP_STEP if draft.tokens else None
        draft_seconds = model.take_seconds()
        truth = reply[written:]
        n_acc = 0
        while n_acc < min(len(draft.tokens), len(truth)) and draft.tokens[n_acc] == truth[n_acc]:
            n_acc += 1
        kept = truth[: n_acc + 1]
        committed += kept
        written += len(kept)
        verify = costs.stalled(costs.verify_seconds(len(draft.tokens) + 1))
        seconds += draft_seconds + verify + costs.overhead
        model.clock.now += verify + costs.overhead
        first = first or seconds
        if trace is not None:
            trace.append("".join(src.value[0].upper() for src in draft.sources) + f"/{n_acc}")
        adaptive.observe(
            len(draft.tokens),
            n_acc,
            draft.step_seconds,
            costs.seen(verify),
            costs.overhead,
            draft.sync_seconds,
            draft.sample_seconds,
        )
    return seconds, first


def main() -> int:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from composite import is_open_chat  # the live benchmark's open-chat prompts

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=Path, nargs="+", default=DEFAULT_PROMPTS)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--verify", type=float, default=27.0, help="ms: a one-token verify pass")
    parser.add_argument("--slope", type=float, default=2.3, help="ms: each further token in a verify batch")
    parser.add_argument("--fixed", type=float, default=12.0, help="ms: the draft model's first draft of a round")
    parser.add_argument("--step", type=float, default=9.5, help="ms: each further draft")
    parser.add_argument(
        "--batch",
        type=float,
        default=0.0,
        help="ms: what a batch of two or more tokens costs beyond the line from the one-token pass",
    )
    parser.add_argument("--trace", nargs="*", default=[], help="prompt ids whose rounds to print")
    parser.add_argument("--catch-up", type=float, default=4.5, help="ms: each token the draft model catches up on")
    parser.add_argument(
        "--read",
        type=float,
        default=4.3,
        help="ms: each prompt token the draft model reads (0: prompt reads left out, as before)",
    )
    parser.add_argument(
        "--noise",
        type=float,
        default=0.0,
        help="log-normal spread of the timings the drafters learn from (0.25: about +-25%%)",
    )
    parser.add_argument(
        "--stalls",
        type=float,
        default=0.0,
        help="the chance that a draft model call or a verify pass stalls (0.05: one in twenty)",
    )
    parser.add_argument("--stall-factor", type=float, default=8.0, help="how many times as long a stall takes")
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="with --noise, --stalls or --orders: replay this many times (seeds 1..N) and print each prompt's mean "
        "share",
    )
    parser.add_argument(
        "--ablate", nargs="*", default=[], choices=sorted(ABLATIONS), help="switch these parts of the composite off"
    )
    parser.add_argument(
        "--read-at",
        type=int,
        metavar="R",
        help="the model reads the prompt at each reply's R-th round or later, as the composite then decides (0: "
        "never), instead of by the composite's rule: what a read's timing alone can reach",
    )
    parser.add_argument(
        "--orders",
        action="store_true",
        help="with --seeds: each seed after the first replays the prompts in an order of its own",
    )
    parser.add_argument(
        "--warm",
        metavar="ID",
        help="every drafter first writes the reply to this prompt of tests/data/prompts.jsonl, not counted (as a "
        "server that served a request before: the composite's model timed and its acceptance counted)",
    )
    parser.add_argument(
        "--window",
        action="store_true",
        help="the window's reply settings (greedy with its repeat penalty) instead of plain greedy decoding",
    )
    args = parser.parse_args()
    warm_messages = None
    if args.warm:  # checked before the models load
        warm_prompts = dict(load_prompts(ROOT / "tests/data/prompts.jsonl", None))
        if args.warm not in warm_prompts:
            parser.error(f"--warm: no prompt {args.warm!r} in tests/data/prompts.jsonl ({', '.join(warm_prompts)})")
        warm_messages = warm_prompts[args.warm]
    if args.read_at is not None:
        print(f"the model reads the prompt at each reply's round {args.read_at} or later (0: never)")
        _read_at(args.read_at)
    for part in args.ablate:
        print(f"ablated: {part} ({ABLATIONS[part][0]})")
        ABLATIONS[part][1]()
    pair = provision_demo_pair()
    runtime = Runtime.load(pair.target, pair.draft, n_ctx=4096)
    assert runtime.draft_context is not None
    context = TimedContext(runtime.draft_context)
    eog = frozenset(runtime.target_side.eog)
    params = GenerationParams(max_tokens=args.max_tokens)
    if args.window:
        from window_defaults import window_setup_params

        params = window_setup_params(args.max_tokens)
    recorded: list[tuple[str, list[str], list[int], list[int]]] = []  # id, groups, prompt, the target's reply
    for path in args.prompts:
        for pid, messages in load_prompts(path, None):
            run = run_once(runtime, messages, params, DrafterKind.NONE, 0)
            prompt = runtime.prompt(messages).tokens
            recorded.append(
                (pid, ["all", path.stem, *(["open chat"] if is_open_chat(pid) else [])], prompt, list(run.tokens))
            )
    warm: tuple[list[int], list[int]] | None = None
    if warm_messages is not None:
        warm = (
            runtime.prompt(warm_messages).tokens,
            list(run_once(runtime, warm_messages, params, DrafterKind.NONE, 0).tokens),
        )
    seeds = range(1, max(args.seeds, 1) + 1)
    shares: dict[str, list[float]] = {}
    worst: list[float] = []  # each seed's lowest prompt share
    for seed in seeds:
        costs = CostModel(
            args.verify / 1000,
            args.slope / 1000,
            args.fixed / 1000,
            args.step / 1000,
            args.catch_up / 1000,
            args.batch / 1000,
            read=args.read / 1000,
            noise=args.noise,
            stall=args.stalls,
            stall_factor=args.stall_factor,
            rng=np.random.default_rng(seed),
        )
        clock = ModelledClock()
        model = ModelledDrafter(context, costs, clock)
        drafters: dict[DrafterKind, Drafter] = {
            DrafterKind.NGRAM: NgramDrafter(),
            DrafterKind.DRAFT_MODEL: model,
            DrafterKind.COMPOSITE: CompositeDrafter(model, clock=clock),
        }
        adaptive = {kind: AdaptiveDepth() for kind in KINDS}
        # Every controller starts from its plain passes measured, as after the app's warm-up.
        for kind_index, kind in enumerate(KINDS):
            for _ in range(3):
                adaptive[kind].observe(0, 0, None, costs.verify_seconds(1), costs.overhead)
            if warm is not None:  # the warm-up reply's noise from a stream of its own, after the prompts'
                runtime.draft_context.truncate(0)
                model.costs = dataclasses.replace(costs, rng=np.random.default_rng((seed, len(recorded), kind_index)))
                replay(drafters[kind], adaptive[kind], model, *warm, eog, params, model.costs)
        groups: dict[str, Group] = {}
        if len(seeds) > 1:
            print(f"seed {seed}")
        print(f"{'prompt':<24}{'tokens':>7}" + "".join(f"{NAMES[k]:>11}" for k in KINDS) + f"{'/best':>7}")
        order = list(range(len(recorded)))
        if args.orders and seed > 1:
            order = [int(i) for i in np.random.default_rng(seed).permutation(len(recorded))]
        seed_shares: list[float] = []
        for index in order:
            pid, names, prompt, reply = recorded[index]
            plain = costs.verify_seconds(1) * costs.stall_mean + costs.overhead  # a plain pass, stalls averaged in
            seconds: dict[DrafterKind | None, float] = {None: len(reply) * plain}
            first: dict[DrafterKind | None, float] = {None: plain}
            for kind_index, kind in enumerate(KINDS):
                runtime.draft_context.truncate(0)
                trace: list[str] | None = [] if pid in args.trace else None
                # Each drafter's noise and stalls from a stream of its own (seed, prompt, drafter): a change to
                # one policy leaves the others' replays as they were, so two runs compare prompt by prompt.
                model.costs = dataclasses.replace(costs, rng=np.random.default_rng((seed, index, kind_index)))
                seconds[kind], first[kind] = replay(
                    drafters[kind], adaptive[kind], model, prompt, reply, eog, params, model.costs, trace
                )
                if trace is not None:
                    print(f"  {NAMES[kind]}: " + " ".join(trace))
            row = Group(seconds, first, prompts=1)
            for name in names:
                groups.setdefault(name, Group()).add(row)
            share = row.share()
            shares.setdefault(pid, []).append(share)
            seed_shares.append(share)
            print(row.line(pid, len(reply)), flush=True)
        worst.append(min(seed_shares))
        for name, group in groups.items():
            print(group.line(f"{name} overall"))
            print(group.first_line())
            shares.setdefault(f"{name} overall", []).append(group.share())
    if len(seeds) > 1:
        print(f"\ncomposite's share of the better single drafter over {len(seeds)} seeds")
        print(f"{'prompt':<24}{'mean':>7}{'min':>7}{'max':>7}")
        for pid, values in shares.items():
            print(f"{pid[:24]:<24}{np.mean(values):>7.0%}{min(values):>7.0%}{max(values):>7.0%}")
        print(f"{'worst prompt':<24}{np.mean(worst):>7.0%}{min(worst):>7.0%}{max(worst):>7.0%}")
    runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
