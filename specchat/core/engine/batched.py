"""Several replies at once: each round verifies every sequence's last token and drafts in one target batch.

Each sequence is the single loop's reply state
(:class:`~specchat.core.engine.speculative.ReplyState`): its own prompt,
sampler, random generator, token limit, stop strings and drafter, and the
same draft, verdict (:func:`~specchat.core.engine.verify.judge`), commit and
events. What differs is the verify step: the rows ``[last] + drafts`` of all
live sequences go into one decode of the target, each under its own sequence
id, and each sequence then settles its own rows and cuts its own cache back.
On a hybrid or recurrent target a sequence whose cut cannot be made in place
saves its recurrent state before the batch (``prepare_rollback``), and its
cut restores that state; once every sequence has cut, the kept tokens of
those that restored are decoded again together, each in its own slot.

Sequences join at a round boundary (:meth:`BatchedEngine.admit`, continuous
batching) and leave when they end; a cancelled one leaves at the next round,
the others go on untouched. A long prompt is read :data:`READ_STEP` tokens
per round, so the replies already running do not stall for the whole of it.

Draft lengths share a **verify budget**: at most ``verify_budget`` rows per
round over the whole batch. Each sequence drafts up to its cap (its fixed
depth, else :data:`~specchat.core.types.MAX_DEPTH`; lookup costs next to
nothing), then the round keeps of each draft what pays (:func:`allot`): every
live sequence has its one row (its last token); the spare rows go to the
drafted tokens likeliest to be kept, the ``j``-th of a sequence worth
``a ** j`` tokens where ``a`` is its measured chance that a draft is kept
once those before it were (accepted drafts over the drafts the target judged
up to each round's first rejection; starting from its drafter's over the
earlier sequences, weighing as :data:`PRIOR_DRAFTS` drafts), none below
:data:`MIN_GAIN`, and of those only as many as make the
expected tokens per second of the whole batch highest, by the one round-cost
model (:class:`~specchat.core.engine.costs.RoundCosts`) learning a round's
seconds by its total rows. A depth the request fixed is kept as far as the
budget goes. So a lone sequence drafts as deep as its acceptance pays for,
and when the batch's own rows already fill the machine the drafts stop except
where they are nearly sure to be kept. Every :data:`EXPLORE_EVERY` rounds
(the first included) the budget alone decides, so a size not measured lately
is timed again.

A sequence drafting with the draft model shares it with the others that do
(:class:`~specchat.core.engine.batched_draft.BatchedDraftModel`: one draft
context, a sequence id each, one decode per draft step for all of them). Its
drafting costs, so its depth is allotted before it drafts, from its cap: the
round's cost then also counts the shared steps, the deepest model draft's
length times the seconds a draft position took lately, and drafts the model
would make are kept only while they raise the batch's rate. The drafts
themselves are drawn as the lone drafter draws them.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from specchat.core.cancel import CancelToken
from specchat.core.engine.batched_auto import Arm, AutoSlotDrafter, ModelGate, choose_arm
from specchat.core.engine.batched_draft import CATCH_UP_ROWS, BatchedDraftModel, SlotDrafter
from specchat.core.engine.costs import RoundCosts
from specchat.core.engine.depth import AdaptiveDepth, DepthControl
from specchat.core.engine.drafters import Draft, Drafter
from specchat.core.engine.speculative import ReplyState, RoundState, TargetContext, TargetSide
from specchat.core.types import (
    MAX_DEPTH,
    DrafterKind,
    Event,
    Finished,
    FinishReason,
    GenerationParams,
    GenerationStats,
    SpecchatError,
    common_prefix_len,
)

DEFAULT_VERIFY_BUDGET = 32
"""Rows the target verifies per round over the whole batch, unless told otherwise."""
MIN_GAIN = 0.05
"""A draft is worth a row while the chance that it and every draft before it are kept is at least this."""
READ_STEP = 256
"""A prompt with more than twice this many tokens to read is read this many per round: the others go on."""
PRIOR_DRAFTS = 4
"""A new sequence's acceptance starts at its drafter's over the earlier sequences, weighing as this many drafts."""
EXPLORE_EVERY = 16
"""Every this many rounds the drafts are sized by the budget alone, not the cost model: a round of another size
is timed now and then, so a cost line learned from plain rounds alone cannot keep drafting off for good."""
EXPLORE_MODEL_DEPTH = 4
"""In such a round a sequence drafting with the shared draft model drafts at most this deep (unless its request
fixed a depth): enough to time its steps again, where sixteen steps over the whole batch would stall every reply."""


class SlotContexts(Protocol):
    """What the engine drives on the target: a :class:`specchat.core.llama.multi_context.MultiContext`."""

    @property
    def n_batch(self) -> int: ...

    @property
    def free_slots(self) -> int: ...

    def acquire(self, prompt: Sequence[int] = ()) -> int: ...

    def release(self, slot: int) -> None: ...

    def clear(self, slot: int) -> None: ...

    def view(self, slot: int) -> TargetContext: ...

    def step(self, rows: Sequence[tuple[int, Sequence[int]]]) -> list[np.ndarray]: ...

    @property
    def tried(self) -> bool:
        """Whether the latest step ran on a thread count the tuner was trying (see TargetContext.tried)."""
        ...

    def replays_together(self) -> AbstractContextManager[None]: ...


@dataclass
class _Reading:
    """A long prompt read a step per round, so that the sequences decoding meanwhile do not wait for all of it."""

    body: Sequence[int]  # the prompt minus its last token
    done: int  # tokens of it the sequence holds
    reused: int  # of those, held before the read began
    seconds: float = 0.0


@dataclass
class _Sequence:
    key: int
    slot: int
    reply: ReplyState
    prior: float  # the acceptance of its drafter's earlier sequences
    arm_priors: dict[Arm, float] = field(default_factory=dict)  # Automatic: each part's, over earlier sequences
    rounds: itertools.count[int] = field(default_factory=itertools.count)
    rejections: int = 0  # rounds that ended in a rejected draft
    reading: _Reading | None = None  # a long prompt still being read, a step per round

    @property
    def reached(self) -> int:
        """Drafts the target judged: every accepted one and the first rejected one of a round (those after it
        were never in question)."""
        return self.reply.stats.accepted + self.rejections

    def acceptance(self) -> float:
        """The chance that a draft is kept once those before it were: accepted over :attr:`reached`, starting
        from ``prior`` (worth :data:`PRIOR_DRAFTS` drafts)."""
        return (self.reply.stats.accepted + PRIOR_DRAFTS * self.prior) / (self.reached + PRIOR_DRAFTS)

    def arm_acceptance(self, arm: Arm | None) -> float:
        """:meth:`acceptance`, or for an automatic sequence that of the part drafting this round."""
        drafter = self.reply.drafter
        if arm is None or not isinstance(drafter, AutoSlotDrafter):
            return self.acceptance()
        return drafter.tally.acceptance(arm, self.arm_priors[arm])

    def cap(self) -> int:
        """The deepest draft this sequence may ask for this round (its fixed depth, its token limit, its room)."""
        reply = self.reply
        if not reply.drafter.can_draft:
            return 0
        requested = reply.depth_control.requested
        k = MAX_DEPTH if requested is None else requested
        remaining = reply.params.max_tokens - reply.stats.generated
        room = reply.ctx.n_ctx - len(reply.committed)
        return max(0, min(k, remaining - 1, room))


def allot(
    caps: Sequence[int],
    acceptance: Sequence[float],
    budget: int,
    min_gain: float = MIN_GAIN,
    cost: Callable[[int], float] | None = None,
    fixed: Sequence[bool] | None = None,
    stepped: Sequence[bool] | None = None,
    step_cost: float = 0.0,
) -> list[int]:
    """Each sequence's draft length this round.

    ``budget`` rows in all, one each for the last tokens. A ``fixed`` sequence (its request set the depth) gets
    its cap first, as far as the budget goes. The other rows go to the drafts likeliest to be kept (the ``j``-th
    draft of sequence ``i`` is worth ``acceptance[i] ** j`` tokens), none above its cap nor worth less than
    ``min_gain``; with ``cost`` (seconds of a round of so many rows), only as many of those drafts as make the
    expected tokens per second of the whole round highest. A ``stepped`` sequence drafts with the shared draft
    model, whose steps all such sequences take together: the round then also costs ``step_cost`` seconds per
    position of the deepest of those drafts.
    """
    n = len(caps)
    fixed = fixed if fixed is not None else [False] * n
    stepped = stepped if stepped is not None else [False] * n
    depths = [0] * n
    spare = max(0, budget - n)
    rows, expected = n, float(n)
    for i in range(n):
        if fixed[i]:
            depths[i] = min(caps[i], spare)
            spare -= depths[i]
            rows += depths[i]
            expected += sum(acceptance[i] ** j for j in range(1, depths[i] + 1))
    worth = [
        (a**j, -i, -j, i)
        for i, (cap, a) in enumerate(zip(caps, acceptance, strict=True))
        if not fixed[i]
        for j in range(1, cap + 1)
        if a**j >= min_gain
    ]
    # Worth falls with j within a sequence, so every prefix of this order is an allotment.
    ranked = sorted(worth, reverse=True)
    chosen = ranked[:spare]
    if cost is not None and n > 0:
        # The shared draft steps cost by the deepest stepped draft, not by the row: so each limit on the stepped
        # drafts' depth is tried (0: no model drafting), with the best prefix of the drafts it allows.
        floor = max((d for d, s in zip(depths, stepped, strict=True) if s), default=0)
        deepest_cap = max((c for c, s, f in zip(caps, stepped, fixed, strict=True) if s and not f), default=0)
        best = -1.0
        for limit in range(floor, max(floor, deepest_cap) + 1):
            allowed = [w for w in ranked if not stepped[w[3]] or -w[2] <= limit][:spare]
            gained, deepest = expected, floor
            take, rate = 0, gained / (cost(rows) + step_cost * deepest)
            top_rate = rate
            for extra, (gain, _, minus_j, i) in enumerate(allowed, start=1):
                gained += gain
                if stepped[i]:
                    deepest = max(deepest, -minus_j)
                rate = gained / (cost(rows + extra) + step_cost * deepest)
                if rate > top_rate:
                    top_rate, take = rate, extra
            if top_rate > best:
                best, chosen = top_rate, allowed[:take]
    for _, _, _, i in chosen:
        depths[i] += 1
    return depths


class BatchedEngine:
    """The sequences decoding together on one multi-sequence target context. One thread drives it.

    ``admit`` reads a new sequence's prompt and returns its key; ``step`` runs
    one round for every live sequence and returns the round's events, each
    with its sequence's key, in order per sequence (Drafted, Verified, and a
    Finished as the sequence's last).
    """

    def __init__(
        self,
        contexts: SlotContexts,
        eog: frozenset[int],
        piece: Callable[[int], bytes],
        *,
        verify_budget: int = DEFAULT_VERIFY_BUDGET,
    ) -> None:
        if verify_budget < 1:
            raise SpecchatError(f"the verify budget must be at least 1 row, got {verify_budget}")
        self.contexts = contexts
        self.eog, self.piece = eog, piece
        self.verify_budget = min(verify_budget, contexts.n_batch)
        self._live: dict[int, _Sequence] = {}
        self._keys = itertools.count()
        self._pooled: dict[str, tuple[int, int]] = {}  # per drafter: reached, accepted over finished sequences
        self.costs = RoundCosts()  # a round's seconds by its total rows, over the whole batch
        self.gate = ModelGate()  # whether automatic sequences' model drafting has paid lately
        self.rounds = 0  # rounds run, over every sequence
        self.rows = 0  # rows verified, over every round
        self.widest = 0  # the most sequences verified in one round

    @property
    def active(self) -> int:
        return len(self._live)

    @property
    def room(self) -> int:
        """How many more sequences may join now."""
        return min(self.contexts.free_slots, self.verify_budget - len(self._live))

    def admit(
        self,
        prompt: Sequence[int],
        params: GenerationParams,
        drafter: Drafter | BatchedDraftModel,
        *,
        depth: DepthControl | None = None,
        cancel: CancelToken | None = None,
        recall: Callable[[int, Sequence[int]], object] | None = None,
        lookup: Drafter | None = None,
    ) -> tuple[int, Finished | None]:
        """Read ``prompt`` into a free sequence and let it join the next round: (its key, None), or (its key,
        Finished) when it ended before its first round (a bad prompt, a failed read: ERROR; cancelled).
        ``drafter`` is the sequence's own, or the shared draft model (the sequence then drafts in its slot of it;
        with ``lookup`` too, it drafts automatically: each round with lookup or the model,
        :mod:`~specchat.core.engine.batched_auto`).

        ``recall(slot, body)`` runs before the sequence reads the prompt minus its last token (``body``): a
        prompt cache loads a kept state sharing more of it into that slot."""
        key = next(self._keys)
        if self.room <= 0:
            raise SpecchatError(f"no room for another sequence ({self.active} running)")
        slot = self.contexts.acquire(prompt)
        if isinstance(drafter, BatchedDraftModel):
            drafter = drafter.drafter(slot) if lookup is None else AutoSlotDrafter(lookup, drafter.drafter(slot))
        try:
            if recall is not None and prompt:
                recall(slot, prompt[:-1])
            reply = ReplyState(
                TargetSide(self.contexts.view(slot), self.eog, self.piece),
                drafter,
                prompt,
                _without_probe(params),
                depth if depth is not None else DepthControl(),
                cancel if cancel is not None else CancelToken(),
                AdaptiveDepth(),
            )
            view, body = self.contexts.view(slot), prompt[:-1]
            held = common_prefix_len(view.tokens, body)
            reading = None
            if len(body) - held > 2 * READ_STEP:
                view.truncate(held)
                reading = _Reading(body, held, held)
                reply.generate_started = time.perf_counter()
            else:
                reply.prefill()
        except SpecchatError as exc:
            self.contexts.clear(slot)
            self.contexts.release(slot)
            _forget(drafter)
            return key, Finished(FinishReason.ERROR, GenerationStats(prompt_tokens=len(prompt)), str(exc))
        arm_priors = {arm: self._prior(_ARM_KINDS[arm]) for arm in Arm} if isinstance(drafter, AutoSlotDrafter) else {}
        self._live[key] = _Sequence(key, slot, reply, self._prior(drafter.kind), arm_priors, reading=reading)
        return key, None

    def _prior(self, kind: str) -> float:
        """The acceptance of ``kind``'s drafts over the finished sequences (a half before any)."""
        reached, accepted = self._pooled.get(kind, (0, 0))
        return (accepted + 1) / (reached + 2)

    def _read_step(self, seq: _Sequence, reading: _Reading) -> None:
        """Read the next step of ``seq``'s long prompt; once it is whole, the sequence joins the next round."""
        started = time.perf_counter()
        reading.done = min(len(reading.body), reading.done + READ_STEP)
        seq.reply.ctx.extend_to(reading.body[: reading.done])
        if isinstance(seq.reply.drafter, SlotDrafter):  # the draft model reads the same step
            seq.reply.drafter.prefill(reading.body[: reading.done])
        reading.seconds += time.perf_counter() - started
        if reading.done == len(reading.body):
            seq.reply.prefill()  # the prompt is held: this reads nothing more
            seq.reply.stats.reused_prompt_tokens = reading.reused
            seq.reply.stats.prompt_seconds += reading.seconds
            seq.reading = None

    def step(self) -> list[tuple[int, Event]]:
        """One round for every live sequence; the events it produced, each with its sequence's key."""
        events: list[tuple[int, Event]] = []
        live: list[_Sequence] = []
        for seq in list(self._live.values()):
            if seq.reply.halted():
                events.append((seq.key, self._end(seq)))
            elif seq.reading is not None:
                try:
                    self._read_step(seq, seq.reading)
                except SpecchatError as exc:
                    seq.reply.reason, seq.reply.message = FinishReason.ERROR, str(exc)
                    events.append((seq.key, self._end(seq)))
            else:
                live.append(seq)
        if not live:
            return events
        round_started = time.perf_counter()
        # Each sequence drafting with lookup drafts up to its cap (it costs next to nothing); then the drafts are
        # cut to what the budget and the cost of the batch's rows say is worth verifying, and the sequences that
        # draft with the shared draft model draft what they were allotted, together.
        rounds: list[RoundState] = []
        arms: list[Arm | None] = []
        fallbacks: list[Draft | None] = []  # an automatic sequence's lookup proposal while the model is asked first
        model_pays = self.gate.allows(len(live), self.rounds)
        for seq in live:
            round_ = RoundState(next(seq.rounds), started=time.perf_counter(), depth=seq.cap())
            arm, fallback = _draft_alone(seq, round_, model_pays)
            arms.append(arm)
            fallbacks.append(fallback)
            rounds.append(round_)
        stepped = [arm is Arm.MODEL for arm in arms]
        depths = self._allot(live, rounds, arms, stepped)
        # An automatic sequence the batch allots no model drafting drafts its lookup proposal after all.
        fallen = [i for i, depth in enumerate(depths) if depth == 0 and fallbacks[i] is not None]
        for i in fallen:
            live[i].reply.take_draft(rounds[i], fallbacks[i] or Draft())
            arms[i], stepped[i] = Arm.LOOKUP, False
        if fallen:
            depths = self._allot(live, rounds, arms, stepped)
        model_seconds = self._draft_together(live, rounds, depths, stepped)
        for seq, round_, depth, shared in zip(live, rounds, depths, stepped, strict=True):
            if not shared:
                _keep_first(round_.draft, depth)
            round_.depth = depth
            drafted = seq.reply.drafted_event(round_)
            if drafted is not None:
                events.append((seq.key, drafted))
        batch = [(s.slot, [s.reply.committed[-1], *r.draft.tokens]) for s, r in zip(live, rounds, strict=True)]
        started = time.perf_counter()
        try:
            for seq, round_ in zip(live, rounds, strict=True):  # a recurrent target's slots save what they must
                seq.reply.ctx.prepare_rollback(len(round_.draft.tokens))
            rows = self.contexts.step(batch)
            tried = self.contexts.tried  # the step's own, before any replay decodes
        except SpecchatError as exc:
            for seq in live:
                seq.reply.reason, seq.reply.message = FinishReason.ERROR, str(exc)
                events.append((seq.key, self._end(seq)))
            return events
        verify_seconds = time.perf_counter() - started
        n_rows = sum(len(b[1]) for b in batch)
        self.rounds += 1
        self.rows += n_rows
        self.widest = max(self.widest, len(batch))
        ending: list[_Sequence] = []
        try:
            # Every cut in place first; the slots that restored a saved state decode their kept drafts again
            # together after the last cut (a recurrent target's; a dense one cuts anywhere).
            with self.contexts.replays_together():
                for seq, round_, seq_rows, arm in zip(live, rounds, rows, arms, strict=True):
                    seq.reply.settle(round_, seq_rows)
                    seq.rejections += round_.verdict.n_accepted < len(round_.draft.tokens)
                    if isinstance(seq.reply.drafter, AutoSlotDrafter) and arm is not None:
                        seq.reply.drafter.tally.observe(
                            arm, round_.number, len(round_.draft.tokens), round_.verdict.n_accepted
                        )
                    round_.verify_seconds = verify_seconds  # the shared batch's time: what this round waited for
                    round_.verify_tried = tried
                    verified = seq.reply.verified_event(round_)
                    seq.reply.account(round_)
                    events.append((seq.key, verified))
                    if seq.reply.reason is not None:
                        ending.append(seq)
        except SpecchatError as exc:  # a failed restore or replay: the sequences of this round end
            ended = {seq.key for seq in ending}
            for seq in live:
                if seq.key not in ended:
                    seq.reply.reason, seq.reply.message = FinishReason.ERROR, str(exc)
                    ending.append(seq)
        for seq in ending:
            events.append((seq.key, self._end(seq)))
        round_seconds = time.perf_counter() - round_started
        overhead = round_seconds - verify_seconds - model_seconds
        if not tried:  # a try's time says what another thread count costs
            self.costs.observe(n_rows - 1, verify_seconds, overhead)
        committed = sum(len(round_.kept) for round_ in rounds)
        # A sequence's first model draft reads its prompt into its slot: a one-off, not what a round with the
        # model costs from then on.
        reads = sum(r.draft.catch_up_seconds or 0.0 for r in rounds if r.draft.catch_up > CATCH_UP_ROWS)
        self.gate.observe(len(live), model_seconds > 0.0, committed, max(0.0, round_seconds - reads), self.rounds)
        return events

    def _draft_together(
        self, live: Sequence[_Sequence], rounds: Sequence[RoundState], depths: Sequence[int], stepped: Sequence[bool]
    ) -> float:
        """Draft for every sequence drafting with the shared draft model, as deep as it was allotted, in shared
        decodes; the seconds it took."""
        asking = [
            (seq, round_, depth)
            for seq, round_, depth, shared in zip(live, rounds, depths, stepped, strict=True)
            if shared and depth > 0
        ]
        if not asking:
            return 0.0
        started = time.perf_counter()
        first = _model_slot(asking[0][0].reply.drafter)
        assert first is not None
        requests = [(seq.slot, seq.reply.draft_request(depth)) for seq, _, depth in asking]
        try:
            drafts = first.owner.draft(requests)
        except SpecchatError:  # a failed draft decode: these sequences verify without drafts, their slots emptied
            for seq, _, _ in asking:
                _forget(seq.reply.drafter)
            drafts = [Draft() for _ in asking]
        for (seq, round_, _), draft in zip(asking, drafts, strict=True):
            seq.reply.take_draft(round_, draft)
        seconds = time.perf_counter() - started
        for _, round_, _ in asking:
            round_.draft_seconds = seconds  # the shared drafting's time: what this round waited for
        return seconds

    def _allot(
        self, live: Sequence[_Sequence], rounds: Sequence[RoundState], arms: Sequence[Arm | None], stepped: list[bool]
    ) -> list[int]:
        """Each live sequence's draft length this round (:func:`allot`, with the shared draft model's step cost)."""
        explore = self.rounds % EXPLORE_EVERY == 0  # the first round, then now and then
        owners = [m.owner for m in (_model_slot(s.reply.drafter) for s in live) if m is not None]
        step_cost = owners[0].step_seconds if owners else None
        return allot(
            [_draft_cap(s, r, shared, explore) for s, r, shared in zip(live, rounds, stepped, strict=True)],
            [s.arm_acceptance(arm) for s, arm in zip(live, arms, strict=True)],
            self.verify_budget,
            cost=None if explore else self._round_costs(),
            fixed=[s.reply.depth_control.requested is not None for s in live],
            stepped=stepped,
            step_cost=step_cost or 0.0,
        )

    def _round_costs(self) -> Callable[[int], float]:
        """Estimated seconds of a round by the rows it verifies over the batch, its drafting and bookkeeping too.

        The verify line as the depth controller reads it (``verify_costs``): each extra row at most a share of a
        one-row pass, never cheaper for more rows, so a few early rounds timed at a load spike cannot price
        drafting out."""
        verify = self.costs.verify_costs(self.verify_budget + 1)
        overhead = self.costs.overhead(True)
        return lambda rows: verify[rows] + overhead

    def cancel_all(self) -> None:
        """Cancel every live sequence: each ends at the next :meth:`step`."""
        for seq in self._live.values():
            seq.reply.cancel.cancel()

    def reset(self) -> None:
        """Drop every live sequence without events and empty their slots (after an unexpected failure)."""
        for seq in self._live.values():
            self.contexts.clear(seq.slot)
            self.contexts.release(seq.slot)
            _forget(seq.reply.drafter)
        self._live.clear()

    def _end(self, seq: _Sequence) -> Finished:
        del self._live[seq.key]
        finished = seq.reply.finish()
        drafter = seq.reply.drafter
        self._pool(drafter.kind, seq.reached, finished.stats.accepted)
        if isinstance(drafter, AutoSlotDrafter):  # each part's figures are its drafter's prior too
            for arm, count in drafter.tally.counts.items():
                self._pool(_ARM_KINDS[arm], count.reached, count.accepted)
        if finished.reason is FinishReason.ERROR:
            self.contexts.clear(seq.slot)  # perhaps mid-round
            _forget(drafter)
        self.contexts.release(seq.slot)
        return finished

    def _pool(self, kind: str, reached: int, accepted: int) -> None:
        pooled_reached, pooled_accepted = self._pooled.get(kind, (0, 0))
        self._pooled[kind] = (pooled_reached + reached, pooled_accepted + accepted)


_ARM_KINDS = {Arm.LOOKUP: DrafterKind.NGRAM.value, Arm.MODEL: DrafterKind.DRAFT_MODEL.value}
"""The drafter whose finished sequences' acceptance an automatic sequence's part starts from."""


def _draft_alone(seq: _Sequence, round_: RoundState, model_pays: bool) -> tuple[Arm | None, Draft | None]:
    """Draft what ``seq`` drafts on its own this round (lookup: up to its cap; it costs next to nothing). Returns
    which part drafts for it: :attr:`Arm.MODEL` for the shared draft model, whose sequences draft later, together
    (None for a drafter of its own, or an automatic sequence with nothing to draft); and for an automatic sequence
    that asks the model first, the lookup proposal to draft if the batch allots the model nothing. An automatic
    sequence drafts with the model only where ``model_pays`` (the batch's
    :class:`~specchat.core.engine.batched_auto.ModelGate`)."""
    drafter = seq.reply.drafter
    if isinstance(drafter, SlotDrafter):
        return Arm.MODEL, None
    if not isinstance(drafter, AutoSlotDrafter):
        seq.reply.draft(round_)
        return None, None
    found = drafter.lookup.draft(seq.reply.draft_request(round_.depth)) if round_.depth > 0 else Draft()
    model_cap = round_.depth if model_pays else 0
    arm = choose_arm(round_.number, len(found.tokens), model_cap, drafter.tally, seq.arm_priors)
    if arm is Arm.LOOKUP:
        seq.reply.take_draft(round_, found)
    return arm, found if arm is Arm.MODEL and found.tokens else None


def _model_slot(drafter: Drafter) -> SlotDrafter | None:
    """The slot of the shared draft model ``drafter`` drafts in, if any."""
    if isinstance(drafter, SlotDrafter):
        return drafter
    return drafter.model if isinstance(drafter, AutoSlotDrafter) else None


def _forget(drafter: Drafter) -> None:
    """Empty the shared draft model's slot of ``drafter``, if it has one (after a failure mid-round)."""
    model = _model_slot(drafter)
    if model is not None:
        model.forget()


def _draft_cap(seq: _Sequence, round_: RoundState, shared: bool, explore: bool) -> int:
    """The most ``seq`` may draft this round: what lookup found, or the shared draft model's cap (at most
    :data:`EXPLORE_MODEL_DEPTH` in an exploring round, unless the request fixed the depth)."""
    if not shared:
        return len(round_.draft.tokens)
    if explore and seq.reply.depth_control.requested is None:
        return min(round_.depth, EXPLORE_MODEL_DEPTH)
    return round_.depth


def _keep_first(draft: Draft, n: int) -> None:
    """Cut ``draft`` to its first ``n`` tokens (verifying a prefix of the drafts is as exact as drafting fewer)."""
    draft.tokens, draft.q, draft.probs = draft.tokens[:n], draft.q[:n], draft.probs[:n]
    draft.sources, draft.match_lengths, draft.top = draft.sources[:n], draft.match_lengths[:n], draft.top[:n]


def _without_probe(params: GenerationParams) -> GenerationParams:
    """``params`` without a plain probe: plain decoding timed inside a shared batch would time the batch."""
    return params if params.plain_probe == 0 else dataclasses.replace(params, plain_probe=0)
