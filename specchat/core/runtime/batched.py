"""Several replies at once on the loaded pair's target: what ``specchat serve --parallel N`` drives.

:class:`BatchedRuntime` is the batched counterpart of :meth:`Runtime.stream
<specchat.core.runtime.runtime.Runtime.stream>`: it owns a second context on
the runtime's target model that holds up to ``n_seq`` sequences
(:class:`~specchat.core.llama.multi_context.MultiContext`) and the batched
engine on it (:class:`~specchat.core.engine.batched.BatchedEngine`). Prompts
come from :meth:`Runtime.prompt` as for every reply; each sequence drafts
with n-gram lookup, with the pair's draft model or not at all. The draft
model is shared: a second multi-sequence context on it, a sequence per slot,
drafts for every sequence that uses it in shared decodes
(:class:`~specchat.core.engine.batched_draft.BatchedDraftModel`), and the
automatic drafter drafts each round with lookup or that shared model
(:mod:`~specchat.core.engine.batched_auto`; with no dense draft model, by
lookup alone). Earlier prompts' target states are kept in the runtime's
prompt cache and loaded back into whichever sequence a later prompt sharing
them gets. MTP heads and a head file are a later step: requests that ask for
those run one at a time on the runtime.
Use it from the thread that owns the runtime.
"""

from __future__ import annotations

from collections.abc import Sequence

from specchat.core.cancel import CancelToken
from specchat.core.engine.batched import DEFAULT_VERIFY_BUDGET, BatchedEngine
from specchat.core.engine.batched_draft import BatchedDraftModel
from specchat.core.engine.depth import DepthControl
from specchat.core.engine.drafters import Drafter
from specchat.core.llama.context import Context
from specchat.core.llama.model import ModelKind
from specchat.core.llama.multi_context import MultiContext
from specchat.core.runtime.runtime import Prompt, Runtime
from specchat.core.types import DrafterKind, Event, Finished, GenerationParams, SpecchatError

CACHE_NAME = "batch-target"  # the prompt cache's name for these sequences' states
DRAFT_CACHE_NAME = "batch-draft"  # and for their states in the shared draft context
BATCHED_DRAFTERS = frozenset({DrafterKind.NGRAM.value, DrafterKind.NONE.value, DrafterKind.COMPOSITE.value})
"""The drafters a batched sequence can always draft with (Automatic by lookup where no draft model is shared)."""
WITH_DRAFT_MODEL = BATCHED_DRAFTERS | {DrafterKind.DRAFT_MODEL.value}
"""With a dense draft model loaded, the batch shares it too."""


class BatchedRuntime:
    """Up to ``n_seq`` replies decoding together on ``runtime``'s target (dense, hybrid or recurrent, on this
    machine: each reply's drafts are taken back on its own sequence)."""

    def __init__(self, runtime: Runtime, n_seq: int, *, verify_budget: int | None = None) -> None:
        if runtime.remote is not None:
            raise SpecchatError(
                "a target on remote devices serves one request at a time for now; use --parallel 1 with --rpc"
            )
        local = runtime.target_context
        tuner = local.tuner if isinstance(local, Context) else None
        self.runtime = runtime
        self.contexts = MultiContext(runtime.target, n_seq=n_seq, n_ctx=runtime.n_ctx, tuner=tuner)
        budget = verify_budget if verify_budget is not None else max(DEFAULT_VERIFY_BUDGET, n_seq)
        if budget < n_seq:
            raise SpecchatError(f"the verify budget ({budget} rows) must be at least the {n_seq} sequences")
        self.engine = BatchedEngine(
            self.contexts, runtime.target.eog_tokens, runtime.target.piece, verify_budget=budget
        )
        self.n_seq = n_seq
        self.draft_contexts: MultiContext | None = None
        self.draft_model: BatchedDraftModel | None = None
        draft = runtime.draft_context
        if draft is not None and runtime.draft is not None and runtime.draft.kind is ModelKind.DENSE:
            try:
                self.draft_contexts = MultiContext(runtime.draft, n_seq=n_seq, n_ctx=runtime.n_ctx, tuner=draft.tuner)
            except BaseException:
                self.contexts.close()
                raise
            self.draft_model = BatchedDraftModel(self.draft_contexts)
        self.drafters = WITH_DRAFT_MODEL if self.draft_model is not None else BATCHED_DRAFTERS
        """The drafters a reply can draft with in this batch."""

    def batchable(self, drafter: str) -> bool:
        """Whether a reply drafting with ``drafter`` can join the batch (with a hybrid or recurrent draft model,
        MTP heads or a head it cannot yet: those run alone)."""
        return drafter in self.drafters

    def drafts_with(self, drafter: str) -> str:
        """What a reply asking for ``drafter`` drafts with in this batch: Automatic with lookup alone where no draft
        model is shared (MTP heads, a head file or none: what else it would draft with cannot batch yet)."""
        if drafter == DrafterKind.COMPOSITE.value and self.draft_model is None:
            return DrafterKind.NGRAM.value
        return drafter

    @property
    def active(self) -> int:
        """Replies in progress."""
        return self.engine.active

    @property
    def room(self) -> int:
        """How many more replies may join at the next round."""
        return self.engine.room

    def admit(
        self,
        prompt: Prompt | Sequence[int],
        params: GenerationParams,
        *,
        drafter: str,
        depth: DepthControl | None = None,
        cancel: CancelToken | None = None,
    ) -> tuple[int, Finished | None]:
        """Read ``prompt`` and let its reply join at the next round: (its key, None), or (its key, Finished) when
        it ended before its first round. A drafter that cannot batch raises SpecchatError."""
        if not self.batchable(drafter):
            raise SpecchatError(
                f"the {drafter} drafter cannot join a batch; only {', '.join(sorted(self.drafters))} can"
            )
        tokens = list(prompt.tokens if isinstance(prompt, Prompt) else prompt)
        drafter = self.drafts_with(drafter)
        chosen: Drafter | BatchedDraftModel
        lookup: Drafter | None = None
        shared = (DrafterKind.DRAFT_MODEL.value, DrafterKind.COMPOSITE.value)
        if drafter in shared and self.draft_model is not None:
            chosen = self.draft_model  # the sequence drafts in its slot of the shared draft context
            recall = self._recall_both
            if drafter == DrafterKind.COMPOSITE.value:  # and by lookup where that pays more
                lookup = self.runtime.drafter_for(DrafterKind.NGRAM.value)
        else:
            chosen = self.runtime.drafter_for(drafter)
            recall = self._recall
        return self.engine.admit(tokens, params, chosen, depth=depth, cancel=cancel, recall=recall, lookup=lookup)

    def _recall(self, slot: int, body: Sequence[int]) -> None:
        """Keep what ``slot`` would drop for ``body`` and load back a kept state sharing more with it (the
        runtime's prompt cache, its states of these sequences kept apart from the one-sequence context's)."""
        self.runtime.prompt_cache.recall(CACHE_NAME, self.contexts.view(slot), body)

    def _recall_both(self, slot: int, body: Sequence[int]) -> None:
        """:meth:`_recall` on the target's slot and on the shared draft context's, for a reply drafting there."""
        self._recall(slot, body)
        if self.draft_contexts is not None:
            self.runtime.prompt_cache.recall(DRAFT_CACHE_NAME, self.draft_contexts.view(slot), body)

    def step(self) -> list[tuple[int, Event]]:
        """One round for every reply in progress; its events, each with its reply's key, in order per reply."""
        return self.engine.step()

    def cancel_all(self) -> None:
        """Every reply in progress ends at the next :meth:`step`."""
        self.engine.cancel_all()

    def reset(self) -> None:
        """Drop every reply in progress, without events, and empty their sequences (after an unexpected failure)."""
        self.engine.reset()

    def close(self) -> None:
        self.contexts.close()
        if self.draft_contexts is not None:
            self.draft_contexts.close()
