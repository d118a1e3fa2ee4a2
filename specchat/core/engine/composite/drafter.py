"""The composite drafter: each round, n-gram lookup or the model drafter (its drafts continued by a lookup).

How a round is decided
======================

The model drafter is a draft model, the target's MTP heads or a head file;
lookup proposes what followed an earlier occurrence of the last n tokens. Each
call of :meth:`CompositeDrafter.draft` is one round, in this order:

1. **Score the last round** (:meth:`~CompositeDrafter._observe`). The tokens
   the target committed since say how many of the last round's drafts were
   kept: each source's span is counted in the acceptance table
   (:class:`~.acceptance.AcceptanceTable`, per source, lookup match length and
   position), each checked model draft by its probability
   (:class:`~.acceptance.Confidence`), and every lookup proposal left undrafted
   as if it had been drafted. The round's seconds against what the cost model
   predicted go to :class:`~specchat.core.engine.realised.RealisedCosts`.
2. **List the candidates.** :meth:`~CompositeDrafter.lookups` finds the lookup
   proposals (n = 6 down to 1, in the conversation, the reply's texts (attachments, a prediction: each
   proposal named by its text, its acceptance kept apart), then the lookup memory, and a copy an edit
   broke off, resumed next to where it broke);
   the model may draft 1..k tokens.
3. **Price them** (:meth:`~CompositeDrafter.costs`, :mod:`.pricing`): a round's
   seconds are the target's verify pass for its batch plus overhead (the
   round-cost model the depth controller learns), plus the model's first draft
   and further steps (:class:`~.timings.ModelTimings`, moving averages in units
   of a one-token pass), times the arm's realised factor; a lookup round is
   charged the catch-up the model will pay for the tokens it sat out.
4. **Choose** (:meth:`~CompositeDrafter.decide`): the candidate with the best
   expected tokens per second (:func:`~.pricing.choose`; expected tokens: 1 plus
   the product of acceptances, position by position). Once the model's costs
   are measured, the model may instead draft on under a
   :class:`~.pricing.StopPlan`, which values each next draft by how sure the
   drafts so far were. Three overrides follow, each keeping knowledge current:
   the model is forced for :data:`tuning.UNMEASURED_TRIES` rounds until its
   costs are timed, probed for :data:`tuning.PROBE_DEPTH` tokens after
   :data:`tuning.PROBE_EVERY` rounds without it (or in a reply's first round
   without a lookup), and any arm (plain, lookup, model) not run for
   :data:`tuning.RETRY_EVERY` rounds gets a short try (:meth:`~CompositeDrafter._retry`).
   Before all that, a model that has not read this reply's prompt yet waits
   while the read would cost more than it saves (:meth:`~CompositeDrafter._without_read`); the read is
   priced by what the model's context does not hold yet, so a prompt read ahead costs nothing.
5. **Draft.** A lookup round appends the proposal (one-hot q). A model round
   drafts while the stop plan says the next token pays, and hands over to a
   lookup where its drafts reach text seen before (:meth:`~CompositeDrafter._stopper`,
   :meth:`~CompositeDrafter._lookup_after_model`); its timings update
   :class:`~.timings.ModelTimings`.
6. **Remember** the round's drafts, sources and lookups until the next call
   scores them (step 1).

Every choice depends only on the committed text and past rounds, so each
token is still drawn from the q its source reports (one-hot for lookup) and
the verdict stays lossless. The constants named above live in :mod:`.tuning`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specchat.core.engine.composite import tuning
from specchat.core.engine.composite.acceptance import AcceptanceTable, Confidence, match_key
from specchat.core.engine.composite.pricing import Candidate, Costs, StopPlan, arm_of, choose, lookup_tail
from specchat.core.engine.composite.timings import ModelTimings, ema
from specchat.core.engine.costs import unmeasured_verify_costs
from specchat.core.engine.depth import DEFAULT_AUTO_START
from specchat.core.engine.drafters.base import Draft, Drafter, DraftRequest
from specchat.core.engine.lookup import (
    Found,
    LookupText,
    find_break,
    find_match,
    find_proposals,
    guess_resumed,
    resume_copy,
)
from specchat.core.engine.realised import RealisedCosts
from specchat.core.engine.sampling import Distribution
from specchat.core.types import DrafterKind, DraftSource, common_prefix_len


@dataclass
class _Pending:
    """A round's proposals, kept until the next round shows what the target committed."""

    base: int  # len(tokens) when drafted
    drafted: list[int]
    sources: list[DraftSource]
    match_lengths: list[int]
    origins: list[str]
    probs: list[float]  # the probability each draft had from its source (1 for lookup)
    lookups: list[Found]  # every lookup proposal, drafted or not
    arm: str = "plain"  # the candidate's label: plain, lookup or model
    number: int = 0  # the composite's round count
    started: float = 0.0  # time.perf_counter() when the round began drafting (its choice made)
    read_seconds: float = 0.0  # the model's prompt read in the round (a one-off, priced apart)
    predicted: float = 0.0  # the round's seconds as the model of costs predicted them for its drafts
    tried: bool = False  # a draft decode ran on a thread count the tuner was trying: the round's time is no cost


class CompositeDrafter(Drafter):
    """Per round the better of n-gram lookup and the model drafter (see the module docstring)."""

    kind = DrafterKind.COMPOSITE
    own_depth = True
    _texts: tuple[LookupText, ...] = ()  # the current reply's texts (DraftRequest.texts), set each round
    # The text's length when a lookup (of a round, or after a model's drafts) last matched a copy in this reply:
    # the gate of the search for a copy an edit broke off.
    _copied_at: int | None = None

    def __init__(
        self,
        model: Drafter,
        *,
        memory: np.ndarray | None = None,
        max_ngram: int = tuning.MAX_NGRAM,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.model = model
        self.clock = clock  # seconds, for timing rounds (a replay passes its modelled clock)
        self.model_source = model.source
        self.memory = memory  # token ids of the lookup memory, searched after the conversation
        self.max_ngram = max_ngram
        self.table = AcceptanceTable({self.model_source: tuning.MODEL_PRIOR}, by_position=model.acceptance_by_position)
        self.confidence = Confidence()
        self.wins: dict[str, int] = {"plain": 0, "lookup": 0, "model": 0}
        self.realised = RealisedCosts()
        self.tries = 0  # rounds that tried an arm not run lately
        self._round = 0
        self.timings = ModelTimings()  # the model's costs, in units of a one-token pass
        self._since_model = 0
        self._stepped = 0  # the round of the model's latest timing step (_time_step)
        self._step_every = tuning.RETRY_EVERY  # rounds between them
        self._unmeasured_tries = 0
        self._first_round = False  # the next round is a reply's first
        self._unread: list[int] | None = None  # the prompt the model has yet to read (see prefill)
        self._reply_tokens: float | None = None  # how long replies run here (a moving average)
        self._reuse = 0.0  # the share of a prompt the target held already (a moving average)
        self._reply_from: int | None = None  # where the current reply began
        self._model_in_reply = False  # whether the model drafted in the current reply
        self._replies_without_model = 0
        self._reply_seen = 0  # how far it has come
        self._regret = 0.0  # seconds the reply's rounds without the model lost against it, so far
        self._regret_mark: tuple[float, int, float] | None = None  # the last such round: clock, tokens, model's rate
        self._pending: _Pending | None = None

    def prefill(self, tokens: Sequence[int]) -> None:
        """A model that follows the text reads the prompt only when it first drafts in the reply: the first
        token never waits for it, and a reply that lookup and plain rounds carry to its end never pays it.
        Until then rounds are priced as if it had read it, and the read is weighed on its own
        (:meth:`_without_read`)."""
        if self._reply_from is not None:  # the previous reply's length, as far as its last round asked
            self._reply_tokens = ema(self._reply_tokens, float(self._reply_seen - self._reply_from))
            self._replies_without_model = 0 if self._model_in_reply else self._replies_without_model + 1
        self._model_in_reply = False
        self._reply_from = self._reply_seen = len(tokens) + 1
        self._pending = None
        self._first_round = True
        self._regret, self._regret_mark = 0.0, None
        self._copied_at = None
        self._unread = None
        if self.model.follows_text:
            self._unread = list(tokens)
        else:
            self.model.prefill(tokens)

    def prompt_reused(self, share: float) -> None:
        self._reuse = ema(self._reuse, share)

    def _behind(self, tokens: Sequence[int]) -> int:
        """Committed tokens the model would catch up on, beyond a round's usual one or two."""
        if self._unread is not None:
            return max(0, len(tokens) - len(self._unread) - 2)
        return self.model.behind(tokens)

    def lookups(
        self, tokens: Sequence[int], k: int, *, memory: bool = True, texts: Sequence[LookupText] | None = None
    ) -> list[Found]:
        """The distinct lookup proposals (real match length, tokens, origin), the longest n-gram searched first.

        At each n: the conversation's and each text's (``texts``, the current reply's where None; from
        :data:`tuning.MIN_MEMORY_NGRAM` tokens), the longest match first, then the lookup memory's where none
        of those matched. Where no match is as long as :data:`tuning.MIN_HANDOVER_MATCH`, a copy an edit broke off
        resumes (:func:`~specchat.core.engine.lookup.resume_copy`, match length 0: its acceptance is kept
        apart), or, where it has not come back yet, the guesses of where it will
        (:func:`~specchat.core.engine.lookup.guess_resumed`, each kind of edit's acceptance kept apart), in place
        of a shorter match's same proposal. ``memory=False``: neither the lookup memory nor a resumed copy
        (quick enough to ask every draft step).
        """
        seq = np.asarray(tokens, dtype=np.int64)
        texts = self._texts if texts is None else texts
        found: list[Found] = []
        seen: set[tuple[int, ...]] = set()
        for n in range(min(self.max_ngram, len(seq) - 1), 0, -1):
            at_n = find_proposals(seq, n, k, texts, max_length=tuning.MAX_MATCH, min_text_ngram=tuning.MIN_MEMORY_NGRAM)
            if not at_n and memory and self.memory is not None and n >= tuning.MIN_MEMORY_NGRAM:
                follow, length = find_match(seq, n, self.memory, max_length=tuning.MAX_MATCH)
                if follow >= 0:
                    at_n = [Found(length, tuple(int(t) for t in self.memory[follow : follow + k]))]
            for proposal in at_n:
                if proposal.tokens and proposal.tokens not in seen:
                    seen.add(proposal.tokens)
                    found.append(proposal)
        if any(f.match >= tuning.RESUME_ALIGNED for f in found):
            self._copied_at = len(seq)
        elif (
            memory
            and self._copied_at is not None
            and len(seq) - self._copied_at <= tuning.RESUME_LOOK_BACK  # only after a copy: cheap in open chat
            and all(f.match < tuning.MIN_HANDOVER_MATCH for f in found)
        ):
            broken = find_break(seq, texts, look_back=tuning.RESUME_LOOK_BACK, aligned=tuning.RESUME_ALIGNED)
            if broken is not None:
                resumed = resume_copy(seq, k, broken, reach=tuning.RESUME_REACH)
                preferred = {text.name for text in texts if text.preferred}  # named as find_proposals names them
                guessed = guess_resumed(k, broken) if broken.edit <= tuning.RESUME_GUESS_EDIT else []
                for proposal in reversed([resumed] if resumed is not None else guessed):
                    if proposal.match < 0 and any(f.tokens == proposal.tokens for f in found):
                        continue  # a match that proposes the same tokens says more than a guess
                    named = [f.origin for f in found if f.tokens == proposal.tokens and f.origin in preferred]
                    found = [f for f in found if f.tokens != proposal.tokens]
                    found.insert(0, proposal._replace(origin=named[0]) if named else proposal)
        return found

    def costs(self, request: DraftRequest) -> Costs:
        """This round's cost estimates: the target's from the round-cost model, the model's from its timings."""
        view = request.costs
        n_max = request.k + 2
        factors: dict[str, float] = {}
        if view is not None and view.measured_plain():
            verify, plain, drafted = view.verify_costs(n_max), view.overhead(False), view.overhead(True)
            factors = self.realised.factors(self._round)
        else:  # in units of a one-token pass
            verify, plain, drafted = unmeasured_verify_costs(n_max), 0.0, 0.0
        fixed, step, catch_up = self.timings.priced(verify[1], self.model.follows_text)
        return Costs(fixed, step, catch_up, verify, plain, drafted, self._behind(request.tokens), factors)

    def draft(self, request: DraftRequest) -> Draft:
        tokens = request.tokens
        self._reply_seen = len(tokens)
        self._texts = tuple(request.texts)
        self._observe(tokens, self.clock(), request.previous_tried)
        k = request.k
        if k <= 0:
            return Draft()
        self._round += 1
        lookups = self.lookups(tokens, k)
        costs = self.costs(request)
        waiting = self._without_read(request, lookups, costs)
        if waiting is not None:  # this round without the model, which has not read the prompt
            best, plan = waiting, None
        else:
            best, plan = self.decide(lookups, k, costs)
        if len(tokens) > (self._reply_from or 0):  # a reply's first round is the model of costs' alone
            tried = self._retry(best, lookups, k, costs)
            if tried is not None:
                best, plan = tried, None
                self.tries += 1
        self.wins[best.label] += 1
        if not best.model and self._step_due() and self._hopeless(lookups, k, costs):
            self._time_step(tokens, costs)
        read_before = self._unread is not None
        # The round is timed from here: the choice above costs every arm alike, so it is no arm's.
        started = self.clock()
        out = Draft()
        if best.model:
            self._since_model = 0
            self._step_every = tuning.RETRY_EVERY
            self._model_in_reply = True
            n, keep_going = best.model, None
            if best.rate > 0.0:  # a chosen round (not a probe): the model drafts on while its confidence pays
                n, keep_going = k, self._stopper(tokens, k, costs, plan, lookups)
            self._draft_model(out, request, n, costs.verify[1], keep_going)
            if out.tokens and len(out.tokens) < k:
                self._lookup_after_model(out, request, costs)
        else:
            self._since_model += 1
            _append_lookup(out, best.lookup, best.match, best.origin)
            out.step_seconds = 0.0 if best.lookup else None
        read_seconds = self.model.read[1] if read_before and self._unread is None else 0.0
        out.read_seconds = read_seconds
        timed = _in_seconds(request)  # predictions comparable with the clock's rounds
        n_model = sum(1 for source in out.sources if source is self.model_source)
        self._pending = _Pending(
            len(tokens),
            out.tokens[:],
            out.sources[:],
            out.match_lengths[:],
            out.origins[:],
            out.probs[:],
            lookups,
            arm_of(len(out.tokens), n_model),
            self._round,
            started,
            read_seconds,
            costs.predicted(len(out.tokens), n_model) if timed else 0.0,
            out.tried,
        )
        return out

    def _retry(self, best: Candidate, lookups: Sequence[Found], k: int, costs: Costs) -> Candidate | None:
        """A short try of an arm that can draft this round and has not run for :data:`tuning.RETRY_EVERY` rounds, in
        place of ``best``; None where none is due (or ``best``'s own arm is, which then runs as chosen).

        The tries keep every arm's realised factor current, so that what a busy machine does to an arm the
        model of costs left out is seen within a bounded number of rounds. A probe or a forced try of the model
        stands, and so does a lookup long enough that a model round would hand over to it. A try of a model
        that has not read the prompt waits until :data:`tuning.READ_RETRY_REPLIES` replies went without it.
        """
        if best.rate == 0.0 or (best.lookup and best.match >= tuning.MIN_HANDOVER_MATCH):
            return None
        arms = ["plain", "model", "lookup"] if lookups else ["plain", "model"]
        if self._unread_tokens() and self._replies_without_model < tuning.READ_RETRY_REPLIES:
            arms.remove("model")
        for arm in arms:
            last = self.realised.last(arm)
            if self._round - (last if last is not None else 1) < tuning.RETRY_EVERY:
                continue
            if arm == "model" and self._hopeless(lookups, k, costs):
                continue  # its timing steps keep it current (_time_step)
            if arm == best.label:
                return None
            if arm == "plain":
                return Candidate((), 0, 0, 0.0)
            if arm == "lookup":
                return dataclasses.replace(
                    choose(lookups, min(tuning.PROBE_DEPTH, k), self.table, costs, None, floor=False), rate=0.0
                )
            return Candidate((), 0, min(tuning.PROBE_DEPTH, k), 0.0)
        return None

    def _unread_tokens(self) -> int:
        """The prompt tokens the model would still decode before its first draft of this reply, beyond a round's
        usual one or two: 0 once it has read, or where its context holds the prompt already (read ahead while
        the user wrote it, or kept from an earlier turn)."""
        return 0 if self._unread is None else self.model.behind(self._unread)

    def _without_read(self, request: DraftRequest, lookups: Sequence[Found], costs: Costs) -> Candidate | None:
        """This round's candidate without the model where the model, which has not read the prompt yet, should
        not read it now; None where it may.

        Rounds are priced as if it had read it; the read itself is a one-off cost that pays only through the
        rounds after it. So it waits in a reply's first round when its read would hold the first token back
        by more than that round would gain (at least a target pass), the next round drafting as a first round
        would; and for as long as what the model would save over the rest of the reply (the best rate with it
        against the best without, per token left: to its token limit, or a usual reply's length here where
        that is shorter), counted again by the share of prompts that come back here, does not cover the read.
        Where it covers the read by less than :data:`tuning.READ_MARGIN` times, the saving is in doubt (a reply
        that copies from its prompt is carried by lookups once it reaches the copied text, so the rate without
        the model is rarely the plain one the saving assumes): rounds run without it while they lose less than
        the read against it (:meth:`_renting`).
        """
        if self._unread is None:
            return None
        unread = self.model.behind(self._unread)
        if not unread:  # it holds the prompt already (read ahead, or kept from before): reading costs nothing
            return None
        read_token = self.timings.read_token
        per_token = costs.catch_up_token if read_token is None else read_token * costs.verify[1]
        read = unread * per_token
        k = request.k
        without = choose(lookups, k, self.table, costs, None)
        with_model = choose(lookups, k, self.table, costs, self.model_source).rate
        gain = 0.0  # what one round the model drafts under its stop plan saves against one without it
        if self.timings.measured:
            tokens, seconds = self._planned_round(costs, self._model_plan(k, costs))
            with_model = max(with_model, tokens / seconds)
            gain = max(0.0, tokens / without.rate - seconds)
        if self._first_round and len(request.tokens) <= len(self._unread) + 1 and read > max(costs.verify[1], gain):
            return without
        if tuning.READ_UNTIMED and not self.timings.measured:  # what it saves is a guess until it has drafted
            return None
        left: float | None = request.remaining
        if self._reply_tokens is not None:  # replies end before their limit: a usual one's length bounds it
            left = min(left if left is not None else self._reply_tokens, self._reply_tokens)
        if left is None:
            return None
        saved = left * max(0.0, 1.0 / without.rate - 1.0 / with_model)
        # What the model reads stays in its cache (the context, the prompt cache) for the conversation's next
        # turn and the prompt's repeats: where prompts here have come back (the share the target held), a read
        # serves about one more reply.
        worth = saved * (1.0 + self._reuse)
        if worth < read:
            return without
        if _in_seconds(request) and worth < read * tuning.READ_MARGIN:  # rent: the loss is timed by the clock
            return without if self._renting(len(request.tokens), with_model, read / (1.0 + self._reuse)) else None
        return None

    def _renting(self, produced: int, with_model: float, read: float) -> bool:
        """Whether the reply's rounds without the model have so far lost less than ``read`` (seconds) against it:
        each round's time less what the model's rate at that round (``with_model``, tokens a second) would have
        taken for the tokens it committed (``produced`` so far). A rent-or-buy rule: a reply lookups carry never
        pays the read, and one that needs the model loses at most about the read again before it reads."""
        now = self.clock()
        if self._regret_mark is not None:
            then, before, rate = self._regret_mark
            self._regret += (now - then) - (produced - before) / rate
        self._regret_mark = (now, produced, with_model)
        return self._regret < read

    def decide(self, lookups: Sequence[Found], k: int, costs: Costs) -> tuple[Candidate, StopPlan | None]:
        """This round's candidate, and the stop plan made for a model round where one was (the round counted).

        The best expected rate wins: :func:`choose` over the lookups and the model
        at fixed lengths, or, once the model's costs are
        measured, the model drafting on under its stop plan (which stops after a
        hesitant draft). A round that would leave the model out drafts with it
        instead (a zero rate: no stop plan) while its costs are unmeasured, for
        :data:`tuning.UNMEASURED_TRIES` rounds at the start depth, and as a probe of
        :data:`tuning.PROBE_DEPTH` every :data:`tuning.PROBE_EVERY` rounds without it, or at once in a reply's
        first round where no lookup is found.
        """
        best = choose(lookups, k, self.table, costs, self.model_source)
        plan: StopPlan | None = None
        if self.timings.measured and not best.model:
            plan = self._model_plan(k, costs)
            tokens, seconds = self._planned_round(costs, plan)
            planned = tokens / seconds
            if planned > best.rate * (1.0 + 1e-9):
                best = Candidate((), 0, k, planned)
        if not best.model:
            probe = min(tuning.PROBE_DEPTH, k)
            if not self.timings.measured and self._unmeasured_tries < tuning.UNMEASURED_TRIES:
                self._unmeasured_tries += 1
                best = Candidate((), 0, min(DEFAULT_AUTO_START, k), 0.0)
            elif (self._since_model >= tuning.PROBE_EVERY or (self._first_round and not best.lookup)) and not (
                self._hopeless(lookups, k, costs)
            ):
                best = Candidate((), 0, probe, 0.0)
        self._first_round = False
        return best, plan

    def _hopeless(self, lookups: Sequence[Found], k: int, costs: Costs) -> bool:
        """Whether a model round, priced by its timings alone, could not beat the best round without it even with
        every draft kept and nothing to catch up on (and that round not charged the catch-up it leaves).

        A probe or try of the model would then tell only what its timings say, at the price of a catch-up on
        every token since it last drafted: on a busy machine, where a draft step can cost more than a target
        pass, that price was most of a reply's time."""
        if not self.timings.measured:
            return False
        rate = choose(lookups, k, self.table, dataclasses.replace(costs, catch_up_token=0.0), None).rate
        # Its timings alone: what its rounds realised beyond them (a hidden cost) only its tries keep current.
        factors = {arm: f for arm, f in costs.factors.items() if arm != "model"}
        fresh = dataclasses.replace(costs, behind=0, factors=factors)
        return all((n + 1) / fresh.round(n, n) <= rate for n in range(1, k + 1))

    def _step_due(self) -> bool:
        """Whether a timing step (:meth:`_time_step`) is due: the first :data:`tuning.RETRY_EVERY` rounds after
        the model last drafted, each next one twice as many rounds later, up to :data:`tuning.STEP_EVERY_MAX`."""
        return self._round - max(self.realised.last("model") or 0, self._stepped) >= self._step_every

    def _time_step(self, tokens: Sequence[int], costs: Costs) -> None:
        """Time one decode of the model's catch-up (work it does anyway before it drafts again): the retry of a
        model its timings keep out, at a step's price."""
        self._stepped = self._round
        self._step_every = min(2 * self._step_every, tuning.STEP_EVERY_MAX)
        seconds = self.model.time_step(tokens)
        if seconds is not None:
            self.timings.stepped(seconds, costs.verify[1])

    @staticmethod
    def _planned_round(costs: Costs, plan: StopPlan) -> tuple[float, float]:
        """The expected tokens and seconds of a round the model drafts under ``plan``."""
        tokens_added, seconds = plan.expected(1.0)
        seconds = (costs.verify[1] + costs.overhead_drafted + seconds) * costs.factors.get("model", 1.0)
        return 1.0 + tokens_added, seconds

    def _model_plan(self, n: int, costs: Costs) -> StopPlan:
        """The stop plan for up to ``n`` model drafts (see :meth:`StopPlan.for_round`)."""
        average = self.table.pooled(self.model_source, 0)
        return StopPlan.for_round(self.table.rates(self.model_source, 0, n), self.confidence, average, costs)

    def _stopper(
        self,
        ahead: Sequence[int],
        n: int,
        costs: Costs,
        plan: StopPlan | None = None,
        lookups: Sequence[Found] = (),
    ) -> Callable[[Sequence[int], Sequence[float]], bool]:
        """Whether the model should draft one more token after ``ahead`` (the committed text) and the drafts so
        far (at most ``n``).

        Asked with the model's drafts so far and their probabilities: their
        acceptance by confidence (:class:`Confidence`) says how likely the round
        still is to reach the next position, and a :class:`StopPlan` says
        whether drafting on pays from there, counting that a later hesitant
        draft can still end the round. The model stops, too, where its drafts
        have reached text seen before and a lookup would continue them better:
        the lookup then takes over (:meth:`_lookup_after_model`), as when a
        reply starts quoting the prompt. The lookup takes over only once the
        model has drafted the token the lookup proposed: a reply that copies
        text with changes (a renamed variable) parts from the lookup exactly
        where the model does, and one decode spent confirming is cheaper than a
        round lost on it; the round's own lookups (``lookups``, after ``ahead``)
        count as proposed, so a first draft that agrees with the longest of them
        confirms it (a reply that starts by repeating an earlier one hands over
        after one draft, not two). ``plan``: the plan for these drafts where the
        round's choice made it already.
        """
        model_rates = self.table.rates(self.model_source, 0, n)
        confidence, table, verify = self.confidence, self.table, costs.verify
        catch_up = costs.catch_up_token
        average = self.table.pooled(self.model_source, 0)
        if plan is None:
            plan = self._model_plan(n, costs)
        longest0 = _longest(lookups)
        proposed = [longest0[1][0]] if longest0 is not None else []  # the lookup's next token, as last asked

        def keep_going(tokens: Sequence[int], probs: Sequence[float]) -> bool:
            i = len(probs)
            if i >= n:
                return False
            survive = 1.0
            for j, prob in enumerate(probs):
                survive *= confidence.rate(prob, model_rates[j], average)
            on = plan.gain(i, survive)
            if on <= 0.0:
                return False
            if not tokens:
                return True
            confirmed = proposed == [tokens[-1]]
            found = self.lookups([*ahead, *tokens], n - i, memory=False)
            longest = _longest(found)
            proposed[:] = [longest[1][0]] if longest is not None else []
            if longest is None or not confirmed or longest[0] < tuning.MIN_HANDOVER_MATCH:
                return True
            gained, alive = 0.0, survive  # a lookup continuing the drafts instead
            rates = table.rates(DraftSource.LOOKUP, match_key(longest.match), len(longest.tokens), longest.origin)
            for j, rate in enumerate(rates):
                alive *= rate
                gained += alive
                if gained - plan.rate * (verify[i + j + 2] - verify[i + 1] + gained * catch_up) > on:
                    return False
            return True

        return keep_going

    def _draft_model(
        self,
        out: Draft,
        request: DraftRequest,
        n: int,
        unit: float,
        keep_going: Callable[[Sequence[int], Sequence[float]], bool] | None = None,
    ) -> None:
        """Append up to ``n`` model drafts to ``out``, and time them (in ``unit`` seconds)."""
        if self._unread is not None:
            self.model.prefill(self._unread)
            self._unread = None
            self.timings.read(*self.model.read, unit)
        ahead = request.tokens
        started = self.clock()
        drafted = self.model.draft(dataclasses.replace(request, tokens=ahead, k=n, keep_going=keep_going))
        seconds = self.clock() - started
        out.tokens += drafted.tokens
        out.q += drafted.q
        out.probs += drafted.probs
        out.sources += [self.model_source] * len(drafted.tokens)
        out.match_lengths += [0] * len(drafted.tokens)
        out.origins += [""] * len(drafted.tokens)
        out.top += drafted.top
        out.step_seconds, out.sync_seconds = drafted.step_seconds, drafted.sync_seconds
        out.sample_seconds = drafted.sample_seconds
        out.tried = drafted.tried
        if not drafted.tried:
            self.timings.drafted(drafted, seconds, unit)

    def _lookup_after_model(self, out: Draft, request: DraftRequest, costs: Costs) -> None:
        """Continue the model's drafts with a lookup, where they reach text seen before (a copy's first words)."""
        ahead = [*request.tokens, *out.tokens]
        longest = _longest(self.lookups(ahead, request.k - len(out.tokens)))
        if longest is None:
            return
        n = lookup_tail(self.table.rates(self.model_source, 0, len(out.tokens)), longest, request.k, self.table, costs)
        _append_lookup(out, longest.tokens[:n], longest.match, longest.origin)

    def _observe(self, tokens: Sequence[int], now: float, tried: bool = False) -> None:
        """Score the previous round's drafts, and every lookup proposal, against what the target committed; time
        its arm's round (from its draft to ``now``, the model's prompt read left out) unless a decode in it ran
        on a thread count the tuner was trying (``tried``: its verify pass), which says what that count costs."""
        pending, self._pending = self._pending, None
        if pending is None or len(tokens) <= pending.base:
            return
        new = tokens[pending.base :]
        if not (tried or pending.tried):
            self.realised.record(
                pending.arm, pending.number, pending.predicted, now - pending.started - pending.read_seconds
            )
        n_acc = common_prefix_len(pending.drafted, new)
        # The drafted tokens, each source's span at its own positions.
        i = 0
        while i < len(pending.drafted):
            source, match, origin = pending.sources[i], pending.match_lengths[i], pending.origins[i]
            j = i
            while j < len(pending.drafted) and pending.sources[j] is source and pending.origins[j] == origin:
                j += 1
            if i <= n_acc:  # the span was reached: the target checked it up to its first rejection
                self.table.record_span(source, match_key(match), 0, j - i, min(n_acc, j) - i, origin=origin)
                if source is self.model_source:
                    for t in range(i, min(j, n_acc + 1)):
                        self.confidence.record(pending.probs[t], t < n_acc)
            i = j
        # Lookup proposals not drafted: the committed tokens say how far they would have been kept.
        drafted_lookup = tuple(
            t for t, s in zip(pending.drafted, pending.sources, strict=True) if s is DraftSource.LOOKUP
        )
        for match, proposal, origin in pending.lookups:
            if drafted_lookup and proposal[: len(drafted_lookup)] == drafted_lookup:
                continue  # scored above
            c = common_prefix_len(proposal, new)
            self.table.record_span(
                DraftSource.LOOKUP, match_key(match), 0, len(proposal), c, censored=c >= len(new), origin=origin
            )


def _append_lookup(out: Draft, tokens: Sequence[int], match: int, origin: str = "") -> None:
    """Append lookup drafts to ``out``: one-hot, from a match of ``match`` tokens in ``origin``."""
    out.origins += [origin] * len(tokens)
    out.tokens += tokens
    out.q += [Distribution.one_hot(t) for t in tokens]
    out.probs += [1.0] * len(tokens)
    out.sources += [DraftSource.LOOKUP] * len(tokens)
    out.match_lengths += [match] * len(tokens)
    out.top += [((t, 1.0),) for t in tokens]


def _in_seconds(request: DraftRequest) -> bool:
    """Whether the round's costs are in seconds (the target's plain pass measured), so comparable with the clock."""
    return request.costs is not None and request.costs.measured_plain()


def _longest(lookups: Sequence[Found]) -> Found | None:
    """The lookup proposal (match length, tokens) of the longest match, or None when there is none; a resumed copy
    (match length 0, found only where every match is short) ranks above the short matches, a guess of where one
    resumes (a negative length) below them."""
    return max(lookups, key=lambda c: c[0] or tuning.MIN_HANDOVER_MATCH - 0.5) if lookups else None
