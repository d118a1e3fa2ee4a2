"""The draft -> verify -> accept loop, as a generator of events.

Invariant between rounds: the target's KV cache holds every committed token
except the last one, ``last``. A round decodes ``[last] + drafts`` in one
batch, which yields the target's distribution after ``last`` and after each
draft; the acceptance rule keeps a prefix of the drafts plus one token of the
target's own, and the cache is cut back so the invariant holds again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from specchat.core.cancel import CancelToken
from specchat.core.engine.depth import AdaptiveDepth, DepthControl
from specchat.core.engine.detok import Detokenizer
from specchat.core.engine.drafters import Draft, Drafter, NoDrafter
from specchat.core.engine.sampling import distribution, greedy_token
from specchat.core.engine.verify import accept_greedy, accept_rejection
from specchat.core.types import (
    Drafted,
    Event,
    FinishReason,
    Finished,
    GenerationParams,
    GenerationStats,
    SpecchatError,
    Verified,
)


@dataclass
class TargetSide:
    """What the loop needs from the target: its context, its end tokens, its token bytes."""

    context: object  # specchat.core.llama.context.Context
    eog: frozenset[int]
    piece: Callable[[int], bytes]


def prefill(target: TargetSide, drafter: Drafter, prompt: Sequence[int]) -> int:
    """Bring both caches to the prompt minus its last token; return the target's reused count.

    Each cache reuses the longest prefix it can (for a recurrent model: up to
    a saved state, see :class:`~specchat.core.llama.context.Context`), and a
    recurrent model's state is saved at the end of the prompt, so that a
    regenerated reply or the next turn does not decode the conversation again.
    """
    body = prompt[:-1]
    reuse = 0
    for ctx in (target.context, getattr(drafter, "context", None)):
        if ctx is None:
            continue
        held = ctx.extend_to(body)  # type: ignore[attr-defined]
        ctx.checkpoint("prompt")  # type: ignore[attr-defined]
        if ctx is target.context:
            reuse = held
    return reuse


def generate(
    target: TargetSide,
    drafter: Drafter,
    prompt: Sequence[int],
    params: GenerationParams,
    *,
    depth: DepthControl | None = None,
    cancel: CancelToken | None = None,
    adaptive: AdaptiveDepth | None = None,
) -> Iterator[Event]:
    """Generate a reply to ``prompt`` (token ids), yielding Drafted/Verified events and one Finished."""
    ctx = target.context
    cancel = cancel if cancel is not None else CancelToken()
    depth = depth if depth is not None else DepthControl(0)
    adaptive = adaptive if adaptive is not None else AdaptiveDepth()
    sampler = params.sampler
    rng = np.random.default_rng(params.seed)
    stats = GenerationStats(prompt_tokens=len(prompt))
    if not prompt:
        raise SpecchatError("the prompt is empty")
    if len(prompt) >= ctx.n_ctx:
        raise SpecchatError(f"the prompt is {len(prompt)} tokens but the context holds {ctx.n_ctx}")

    started = time.perf_counter()
    stats.reused_prompt_tokens = prefill(target, drafter, prompt)
    stats.prompt_seconds = time.perf_counter() - started

    committed = list(prompt)
    detok = Detokenizer(target.piece)
    text_so_far: list[str] = []
    stop_strings = tuple(s for s in params.stop_strings if s)
    longest_stop = max((len(s) for s in stop_strings), default=0)
    gen_started = time.perf_counter()
    reason: FinishReason | None = None
    message = ""
    round_no = 0

    def finish() -> Finished:
        stats.generate_seconds = time.perf_counter() - gen_started
        stats.plain_tokens_per_second_estimate = adaptive.plain_rate_estimate()
        return Finished(reason or FinishReason.ERROR, stats, message)

    while True:
        round_started = time.perf_counter()
        if cancel.cancelled:
            reason = FinishReason.CANCELLED
            yield finish()
            return
        remaining = params.max_tokens - stats.generated
        room = ctx.n_ctx - len(committed)  # positions left for [last] + drafts beyond the current n_past
        if room < 0:
            reason, message = FinishReason.CONTEXT_FULL, f"the {ctx.n_ctx}-token context is full"
            yield finish()
            return
        requested = depth.requested
        if isinstance(drafter, NoDrafter):
            k = 0
        elif requested is None:
            k = adaptive.choose()
        else:
            k = requested
        k = max(0, min(k, remaining - 1, room))

        draft_started = time.perf_counter()
        draft = (drafter.draft(committed, k, sampler, rng, cancel, params.draft_p_min, params.greedy_draft)
                 if k > 0 else Draft())
        draft_seconds = time.perf_counter() - draft_started
        consumer_seconds = 0.0
        drafts = draft.tokens
        if cancel.cancelled:
            reason = FinishReason.CANCELLED
            yield finish()
            return
        draft_pieces: list[str] = []
        if drafts:
            fork = detok.fork()
            draft_pieces = [fork.push(t) for t in drafts]
            handed = time.perf_counter()
            yield Drafted(round_no, tuple(drafts), tuple(draft_pieces), tuple(draft.probs))
            consumer_seconds = time.perf_counter() - handed  # the front end's time, not the engine's

        verify_started = time.perf_counter()
        ctx.prepare_rollback(len(drafts))  # a recurrent target saves its state unless it can roll back in place
        rows = ctx.decode([committed[-1], *drafts], all_logits=True)
        history = committed[-sampler.repeat_last_n :] if sampler.repeat_last_n else []

        def hist_at(i: int) -> list[int]:
            return history + drafts[:i]

        if sampler.greedy:
            choices: list[int] = []
            for i in range(len(drafts) + 1):
                choices.append(greedy_token(rows[i], hist_at(i), sampler))
                if i == len(drafts) or drafts[i] != choices[i]:
                    break
            n_acc, nxt = accept_greedy(drafts, choices)
            p_dists = None
        else:
            p_dists = [distribution(rows[i], hist_at(i), sampler) for i in range(len(drafts) + 1)]
            n_acc, nxt = accept_rejection(drafts, p_dists, draft.q, rng)
        # Probabilities for display: the target's (sampler-shaped) probability of each draft.
        shown = p_dists or [distribution(rows[i], hist_at(i), sampler) for i in range(len(drafts) + 1)]
        target_probs = tuple(shown[i].prob(t) for i, t in enumerate(drafts))
        correction_prob = shown[n_acc].prob(nxt)

        new_tokens = [*drafts[:n_acc], nxt]
        kept: list[int] = []
        for t in new_tokens:
            if stats.generated + len(kept) >= params.max_tokens:
                reason = FinishReason.MAX_TOKENS
                break
            kept.append(t)
            if t in target.eog:
                reason = FinishReason.EOS
                break
        if reason is None and stats.generated + len(kept) >= params.max_tokens:
            reason = FinishReason.MAX_TOKENS
        committed.extend(kept)
        ctx.truncate(len(committed) - 1)  # checked: an exact recovery where the memory cannot cut in place
        verify_seconds = time.perf_counter() - verify_started
        assert len(ctx.tokens) == len(committed) - 1  # the loop's invariant

        n_kept_drafts = min(len(kept), n_acc)
        accepted = drafts[:n_kept_drafts]
        correction = kept[-1] if len(kept) > n_acc else None
        accepted_pieces = [detok.push(t) if t not in target.eog else "" for t in accepted]
        correction_piece = ""
        if correction is not None and correction not in target.eog:
            correction_piece = detok.push(correction)

        if stop_strings:
            before = "".join(text_so_far)
            added = "".join(accepted_pieces) + correction_piece
            window = before[-longest_stop:] + added
            hits = [window.find(s) for s in stop_strings]
            hits = [h for h in hits if h >= 0]
            if hits:
                cut = min(hits) - min(len(before), longest_stop)  # index into `added`
                accepted_pieces, correction_piece = _trim_pieces(accepted_pieces, correction_piece, max(cut, 0))
                reason = FinishReason.STOP_STRING

        stats.rounds += 1 if drafts else 0
        stats.drafted += len(drafts)
        stats.accepted += n_acc
        stats.generated += len(kept)
        stats.depth = k
        overhead_seconds = time.perf_counter() - round_started - draft_seconds - verify_seconds - consumer_seconds
        adaptive.observe(len(drafts), n_acc, draft.step_seconds, verify_seconds, overhead_seconds,
                         draft.sync_seconds, draft.sample_seconds)
        event = Verified(
            round=round_no,
            depth=k,
            accepted=tuple(accepted),
            rejected=tuple(drafts[n_acc:]),
            correction=correction,
            accepted_pieces=tuple(accepted_pieces),
            rejected_pieces=tuple(draft_pieces[n_acc:]),
            correction_piece=correction_piece,
            target_probs=target_probs,
            draft_probs=tuple(draft.probs),
            correction_prob=correction_prob,
        )
        text_so_far.append(event.text)
        yield event
        round_no += 1
        if reason is not None:
            yield finish()
            return


def _trim_pieces(pieces: list[str], tail: str, keep_chars: int) -> tuple[list[str], str]:
    """Cut the round's pieces so that only the first ``keep_chars`` characters remain."""
    out: list[str] = []
    left = keep_chars
    for p in pieces:
        out.append(p[: max(left, 0)])
        left -= len(p)
    return out, tail[: max(left, 0)]
