"""The loaded pair: what the window, the terminal and the server drive.

:class:`Runtime` owns the llama.cpp models and contexts (use it from one
thread): the target, local or in a child process on remote devices, and what
drafts for it (a draft model, the target's MTP heads, a head, or lookup, which
needs nothing). It says which drafters it can run (the registry,
:mod:`specchat.core.engine.registry`) and where each model runs, and it is the
one way a reply is driven: :meth:`Runtime.prompt` builds a reply's prompt
(the chat template, the messages checked once, the size guard, tools) and
:meth:`Runtime.stream` streams the reply to it as engine events (kept prompts
recalled, a long prompt read in steps, the speculative loop, the caches
forgotten after an error). A conversation kept between turns is
:class:`~specchat.core.runtime.conversation.Conversation`, built on these two.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specchat.core.cancel import CancelToken
from specchat.core.engine.composite import CompositeDrafter
from specchat.core.engine.depth import AdaptiveDepth, DepthControl
from specchat.core.engine.drafters import Drafter
from specchat.core.engine.lookup import LookupText
from specchat.core.engine.registry import DrafterEntry, Parts, available_drafters, default_drafter, entry_for
from specchat.core.engine.speculative import TargetSide, generate
from specchat.core.llama.context import Context, MtpContext, check_memory_support
from specchat.core.llama.devices import offload_supported
from specchat.core.llama.heads import DFlashContext, Eagle3Context, head_info, is_head, open_draft
from specchat.core.llama.model import Model, vocab_mismatch
from specchat.core.llama.rpc.binding import local_devices
from specchat.core.llama.rpc.target import RemoteTarget
from specchat.core.models.ggufmeta import read_gguf_info
from specchat.core.models.heads import head_problems, read_head
from specchat.core.models.placement import describe_placement, layers_bytes, resolve_gpu_layers, resolve_remote_layers
from specchat.core.models.shape import read_model_shape
from specchat.core.remote import DEFAULT_DEADLINE
from specchat.core.runtime.prompt_cache import PromptCache
from specchat.core.runtime.remote import require_rpc
from specchat.core.runtime.sources import lookup_texts
from specchat.core.runtime.template import ChatTemplate, tools_in_system, validate_messages
from specchat.core.types import (
    GPU_LAYERS_AUTO,
    MAX_DEPTH,
    Event,
    Finished,
    FinishReason,
    GenerationParams,
    GenerationStats,
    GpuLayers,
    PromptTooLongError,
    SpecchatError,
    TextSource,
    common_prefix_len,
)

LoadProgress = Callable[[str, float], bool]
PromptProgress = Callable[[int, int], None]  # prompt tokens in the target's cache so far, of how many
PROMPT_STEP = 256  # a long prompt is read in steps of this many tokens, reporting and checking Stop between them


def check_head_fits(target: Model, head: Model) -> None:
    """One line on why ``head`` cannot draft for ``target``, by the rule the picker applies to the two files'
    headers (:func:`~specchat.core.models.heads.head_problems`); run before a head is opened, since llama.cpp
    aborts on most of what it refuses."""
    header = read_head(head.path)
    if header is None:
        return
    problems = head_problems(header, read_gguf_info(target.path), target.n_layers, target.n_embd)
    if problems:
        raise SpecchatError(f"{head.name} ({head_info(head).describe()}) cannot draft for {target.name}: {problems[0]}")


@dataclass(frozen=True)
class Prompt:
    """A reply's prompt: the text (the chat template's, then any continuation) and the target's tokens for it."""

    text: str
    tokens: list[int]


class Runtime:
    """A target model (and optionally a draft model or the target's MTP heads) with one context each."""

    def __init__(
        self,
        target: Model,
        draft: Model | None,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        vocab_checked: bool = False,
        target_rollback: int = MAX_DEPTH,
        target_context: RemoteTarget | None = None,
    ) -> None:
        if draft is not None and not vocab_checked:
            problem = vocab_mismatch(target, draft)
            if problem:
                raise SpecchatError(f"the draft cannot speculate for this target: {problem}")
        n_ctx = min(n_ctx, target.n_ctx_train) if target.n_ctx_train > 0 else n_ctx
        self.target = target
        self.draft = draft
        # A hybrid or recurrent target keeps recurrent snapshots for the deepest draft, where its
        # architecture allows (llama.cpp grants none otherwise, and the context saves states instead).
        # A target on remote devices brings its context (in a child process); ``target`` is then its vocabulary.
        self.remote = target_context
        self.target_context: Context | RemoteTarget = target_context or Context(
            target, n_ctx=n_ctx, n_threads=n_threads, rollback=target_rollback
        )
        self.draft_context: Context | None = None
        self.mtp_context: MtpContext | None = None
        self.head_context: Eagle3Context | DFlashContext | None = None  # a head loaded as the draft
        try:
            if draft is not None and target_context is None and is_head(draft):
                check_head_fits(target, draft)
            self.draft_context, self.head_context = open_draft(
                self.target_context, draft, n_ctx=n_ctx, n_threads=n_threads
            )
            # one observer follows the target: a head loaded as the draft takes the place of its MTP heads
            if getattr(target, "mtp_loaded", False) and target.n_layer_nextn > 0 and self.head_context is None:
                assert isinstance(self.target_context, Context)
                self.mtp_context = MtpContext(self.target_context, n_threads=n_threads)
            self.template = ChatTemplate(
                target.chat_template(),
                bos_token=target.token_text(target.bos) if target.bos >= 0 else "",
                eos_token=target.token_text(target.eos) if target.eos >= 0 else "",
            )
        except BaseException:
            for context in (self.head_context, self.mtp_context, self.draft_context, self.target_context):
                if context is not None and context is not target_context:
                    context.close()
            raise
        self.target_side = TargetSide(self.target_context, target.eog_tokens, target.piece)
        # Costs and acceptance belong to the loaded pair and the drafter, not to one
        # conversation: keeping them here spares every new reply the controller's warm-up.
        self._adaptive: dict[str, AdaptiveDepth] = {}
        # A drafter that learns (the composite: which source wins per round) is kept; like the costs, that
        # outlives a reply.
        self._kept: dict[str, Drafter] = {}
        self.lookup_memory: np.ndarray | None = None  # token ids the composite's lookup also searches
        self.prompt_cache = PromptCache()

    def set_lookup_memory(self, texts: Iterable[str] | None) -> None:
        """Let the composite drafter's lookup also search ``texts`` (None: only the conversation)."""
        if texts is None:
            self.lookup_memory = None
        else:
            ids = [t for text in texts for t in self.target.tokenize(text, parse_special=False)]
            self.lookup_memory = np.asarray(ids, dtype=np.int64) if ids else None
        for drafter in self._kept.values():
            if isinstance(drafter, CompositeDrafter):
                drafter.memory = self.lookup_memory

    # --- what it can draft with ---------------------------------------------
    @property
    def parts(self) -> Parts:
        """What the pair offers drafters beside the target (the registry's :class:`Parts`)."""
        return Parts(self.draft_context, self.mtp_context, self.head_context)

    @property
    def offered(self) -> frozenset[str]:
        """The names of the parts loaded (:class:`~specchat.core.engine.registry.Part` values)."""
        return self.parts.offered()

    def drafters(self) -> list[DrafterEntry]:
        """The registry's drafters this pair can run, in list order."""
        return available_drafters(self.offered)

    def drafter_for(self, kind: str) -> Drafter:
        """A drafter of ``kind`` on this pair; one that learns (``keep``) is kept between replies."""
        entry = entry_for(kind, self.parts)
        drafter = self._kept.get(entry.name)
        if drafter is None:
            drafter = entry.make(self.parts)
        if entry.keep:
            self._kept[entry.name] = drafter
        if isinstance(drafter, CompositeDrafter):
            drafter.memory = self.lookup_memory
        return drafter

    def adaptive_for(self, drafter: str) -> AdaptiveDepth:
        """The adaptive depth controller for this pair and drafter (created on first use)."""
        return self._adaptive.setdefault(entry_for(drafter, self.parts).name, AdaptiveDepth())

    # --- the caches ----------------------------------------------------------
    def forget_contexts(self) -> None:
        """Empty the target's and the draft's contexts (after an error they may be mid-round); kept prompts stay."""
        self.target_context.truncate(0)
        if self.draft_context is not None:
            self.draft_context.truncate(0)

    def empty_caches(self) -> None:
        """Forget what the contexts hold and every kept prompt: the next reply reads its prompt whole."""
        self.prompt_cache.clear()
        self.forget_contexts()

    def recall(self, prompt: Sequence[int]) -> None:
        """Before a reply to ``prompt``: keep what the caches would drop, and load back a kept state that
        shares more of the prompt than they do (:class:`PromptCache`). Not where the MTP heads or a head
        follow the target (their state is not kept with it), nor for a target on remote devices."""
        if self.mtp_context is not None or self.head_context is not None or self.remote is not None:
            return
        body = prompt[:-1]
        assert isinstance(self.target_context, Context)
        self.prompt_cache.recall("target", self.target_context, body)
        if self.draft_context is not None:
            self.prompt_cache.recall("draft", self.draft_context, body)

    # --- replies: the one way a reply is driven ---------------------------------
    def prompt(
        self,
        messages: Sequence[dict[str, str]] | str,
        *,
        continuation: str = "",
        tools: Sequence[dict[str, Any]] | None = None,
        reply_to_user: bool = True,
    ) -> Prompt:
        """The prompt for a reply to ``messages`` (through the model's chat template), or a plain ``str``.

        The messages are checked once (and, with ``reply_to_user``, the last must be the user's); ``tools``
        (OpenAI function definitions) go to a template that renders them, else into the system message.
        ``continuation`` (a reply cut at the token limit) ends the prompt. A prompt the context cannot hold
        raises :class:`~specchat.core.types.PromptTooLongError`, before tokenizing where its bytes alone say so.
        """
        if isinstance(messages, str):
            text = messages
        else:
            validate_messages(messages)
            if reply_to_user and messages[-1]["role"] != "user":
                raise SpecchatError("the last message must be from the user to get a reply")
            if tools and not self.template.uses_tools:
                messages, tools = tools_in_system(messages, tools), None
            text = self.template.render(messages, tools=tools or None, checked=True)
        text += continuation
        what = "the prompt" if isinstance(messages, str) else "the conversation"
        advice = "" if isinstance(messages, str) else "; start a new conversation or raise the context size"
        # Checked before tokenizing: a prompt of 100 MB took minutes and gigabytes to be refused after it.
        fewest = self.target.fewest_tokens(len(text.encode("utf-8"))) if len(text) >= self.n_ctx else 0
        if fewest >= self.n_ctx:
            raise PromptTooLongError(
                f"{what} is at least {fewest:,} tokens but the context holds {self.n_ctx}{advice}",
                tokens=fewest,
                n_ctx=self.n_ctx,
                at_least=True,
            )
        tokens = self.target.tokenize(text, add_special=True, parse_special=True)
        if len(tokens) >= self.n_ctx:
            raise PromptTooLongError(
                f"{what} is {len(tokens)} tokens but the context holds {self.n_ctx}{advice}",
                tokens=len(tokens),
                n_ctx=self.n_ctx,
            )
        return Prompt(text, tokens)

    def stream(
        self,
        prompt: Prompt | Sequence[int],
        params: GenerationParams,
        *,
        drafter: str | None = None,
        depth: DepthControl | None = None,
        cancel: CancelToken | None = None,
        progress: PromptProgress | None = None,
        recall: bool = True,
        sources: Sequence[TextSource] = (),
    ) -> Iterator[Event]:
        """The reply to ``prompt`` as engine events: Drafted and Verified per round, then one Finished.

        ``drafter`` None drafts with the best the pair allows (the registry's default). ``sources``: texts the
        user or client holds (attachments, a prediction) that lookup drafts from for this reply only, beside the
        conversation; a token drafted from one names it (``Verified.origins``). The reply is the same with or
        without them (greedy: token for token; sampled: by the exact rule). Whatever the caches
        hold of the prompt is reused, and with ``recall`` a kept earlier prompt sharing more is loaded back
        (:meth:`recall`). With ``progress``, a prompt with more than two steps to read is read step by step,
        each reported and ``cancel`` checked between them. A drafter the pair lacks raises SpecchatError
        here, before the first event; an error once the reply has begun ends it with a Finished of reason
        ERROR, and the contexts are emptied (they may be mid-round).
        """
        tokens = list(prompt.tokens if isinstance(prompt, Prompt) else prompt)
        kind = default_drafter(self.offered).name if drafter is None else drafter
        chosen = self.drafter_for(kind)
        adaptive = self.adaptive_for(kind)
        texts = lookup_texts(sources, tokens, self._tokenize_source) if sources else []
        return self._stream(tokens, params, chosen, adaptive, depth, cancel, progress, recall, texts)

    def _tokenize_source(self, text: str) -> list[int]:
        return list(self.target.tokenize(text, parse_special=False))

    def reply(
        self,
        messages: list[dict[str, str]],
        params: GenerationParams,
        *,
        drafter: str | None = None,
        depth: DepthControl | None = None,
        cancel: CancelToken | None = None,
        continuation: str = "",
        progress: PromptProgress | None = None,
        sources: Sequence[TextSource] = (),
    ) -> Iterator[Event]:
        """The reply to ``messages`` (the last one the user's): :meth:`prompt`, then :meth:`stream` (``sources``:
        texts lookup drafts from, as there)."""
        if not messages:
            raise SpecchatError("no messages to reply to")
        return self.stream(
            self.prompt(messages, continuation=continuation),
            params,
            drafter=drafter,
            depth=depth,
            cancel=cancel,
            progress=progress,
            sources=sources,
        )

    def _stream(
        self,
        prompt: list[int],
        params: GenerationParams,
        drafter: Drafter,
        adaptive: AdaptiveDepth,
        depth: DepthControl | None,
        cancel: CancelToken | None,
        progress: PromptProgress | None,
        recall: bool,
        texts: Sequence[LookupText] = (),
    ) -> Iterator[Event]:
        if self.remote is not None:  # Stop also ends a wait on a server that does not answer
            self.remote.keep_waiting = None if cancel is None else (lambda: not cancel.cancelled)
        try:
            if recall:
                self.recall(prompt)
            read = self._read_prompt(prompt, progress, cancel) if progress is not None else None
            if read is not None and cancel is not None and cancel.cancelled:
                stream: Iterable[Event] = [
                    Finished(
                        FinishReason.CANCELLED,
                        GenerationStats(prompt_tokens=len(prompt)),
                        "stopped while reading the prompt",
                    )
                ]
            else:
                stream = generate(
                    self.target_side,
                    drafter,
                    prompt,
                    params,
                    depth=depth,
                    cancel=cancel,
                    adaptive=adaptive,
                    texts=texts,
                )
            for event in stream:
                if isinstance(event, Finished):
                    if read is not None:  # the prompt was read before the loop: its figures are those steps'
                        event.stats.reused_prompt_tokens = read[0]
                        event.stats.prompt_seconds += read[1]
                    if event.reason is FinishReason.ERROR:
                        self.forget_contexts()
                yield event
        except SpecchatError as exc:  # before the reply began: it has no figures yet
            self.forget_contexts()
            yield Finished(FinishReason.ERROR, GenerationStats(), str(exc))

    def _read_prompt(
        self, prompt: list[int], progress: PromptProgress, cancel: CancelToken | None
    ) -> tuple[int, float] | None:
        """Bring the target to a long prompt step by step, reporting each; (reused, seconds), None if short.

        The speculative loop's own prefill then finds the prompt in the cache and decodes nothing more.
        """
        target = self.target_context
        body = prompt[:-1]
        if len(body) - common_prefix_len(target.tokens, body) <= 2 * PROMPT_STEP:
            return None
        started = time.perf_counter()
        reused = done = target.extend_to(body[: common_prefix_len(target.tokens, body)])
        progress(done, len(body))
        while done < len(body) and not (cancel is not None and cancel.cancelled):
            done = min(len(body), done + PROMPT_STEP)
            target.extend_to(body[:done])
            progress(done, len(body))
        return reused, time.perf_counter() - started

    @classmethod
    def load(
        cls,
        target: str | Path,
        draft: str | Path | None = None,
        *,
        n_ctx: int = 4096,
        n_gpu_layers: GpuLayers = 0,
        draft_gpu_layers: GpuLayers = 0,
        n_threads: int | None = None,
        progress: LoadProgress | None = None,
        target_rollback: int = MAX_DEPTH,
        rpc_servers: tuple[str, ...] = (),
        rpc_deadline: float = DEFAULT_DEADLINE,
    ) -> Runtime:
        """Load the pair; raises SpecchatError with a one-line message on bad files or an incompatible draft.

        GPU layers use llama.cpp's convention (-1 all, 0 none) or ``"auto"``,
        which fits both models into the free device memory (CPU on a build
        that cannot offload). ``target_rollback`` is the recurrent snapshots
        a hybrid or recurrent target asks for (0: always restore saved states).
        With ``rpc_servers`` the target's layers go to those servers' devices
        (and the local GPUs), its context in a child process with a deadline
        of ``rpc_deadline`` seconds per call; the draft stays on this machine.
        """
        if rpc_servers:
            return cls._load_remote(
                target,
                draft,
                n_ctx=n_ctx,
                n_gpu_layers=n_gpu_layers,
                draft_gpu_layers=draft_gpu_layers,
                n_threads=n_threads,
                progress=progress,
                target_rollback=target_rollback,
                servers=rpc_servers,
                deadline=rpc_deadline,
            )

        def stage(name: str) -> Callable[[float], bool] | None:
            return None if progress is None else (lambda f: progress(name, f))

        # Check what can be checked before spending time and memory on either model's weights:
        # whether this build can take back a recurrent model's state, and the vocabularies.
        target_vocab = Model(target, vocab_only=True)
        try:
            check_memory_support(target_vocab)
            with_mtp = target_vocab.n_layer_nextn > 0  # load the heads: they draft without a second model
            if draft is not None:
                draft_vocab = Model(draft, vocab_only=True)
                try:
                    check_memory_support(draft_vocab)
                    problem = vocab_mismatch(target_vocab, draft_vocab)
                finally:
                    draft_vocab.close()
                if problem:
                    raise SpecchatError(f"the draft cannot speculate for this target: {problem}")
        finally:
            target_vocab.close()
        target_layers, draft_layers = resolve_gpu_layers(target, draft, n_gpu_layers, draft_gpu_layers, n_ctx=n_ctx)
        loaded: list[Model] = []
        try:
            loaded.append(Model(target, n_gpu_layers=target_layers, progress=stage("target"), load_mtp=with_mtp))
            if draft is not None:
                loaded.append(Model(draft, n_gpu_layers=draft_layers, progress=stage("draft")))
            target_model, draft_model = loaded[0], loaded[1] if draft is not None else None
            return cls(
                target_model,
                draft_model,
                n_ctx=n_ctx,
                n_threads=n_threads,
                vocab_checked=True,
                target_rollback=target_rollback,
            )
        except BaseException:
            # Free the weights (gigabytes, perhaps on the GPU) now, not when the traceback is collected.
            for model in loaded:
                model.close()
            raise

    @classmethod
    def _load_remote(
        cls,
        target: str | Path,
        draft: str | Path | None,
        *,
        n_ctx: int,
        n_gpu_layers: GpuLayers,
        draft_gpu_layers: GpuLayers,
        n_threads: int | None,
        progress: LoadProgress | None,
        target_rollback: int,
        servers: tuple[str, ...],
        deadline: float,
    ) -> Runtime:
        """The target on remote devices in a child process; its vocabulary and the draft here."""
        require_rpc()
        loaded: list[Model] = []
        remote: RemoteTarget | None = None
        try:
            loaded.append(Model(target, vocab_only=True))
            check_memory_support(loaded[0])
            if draft is not None:
                draft_vocab = Model(draft, vocab_only=True)
                try:
                    check_memory_support(draft_vocab)
                    problem = vocab_mismatch(loaded[0], draft_vocab)
                finally:
                    draft_vocab.close()
                if problem:
                    raise SpecchatError(f"the draft cannot speculate for this target: {problem}")
            if progress is not None:
                progress("connecting", 0.0)
            # Cancelling the load also ends a wait on a server that does not answer.
            remote = RemoteTarget(
                servers,
                deadline=deadline,
                keep_waiting=None if progress is None else (lambda: progress("connecting", 0.0)),
            )
            # Servers are given to hold the target's layers: "none" (the API's default) means as many as fit.
            target_layers, draft_layers = resolve_remote_layers(
                target,
                draft,
                n_gpu_layers or GPU_LAYERS_AUTO,
                draft_gpu_layers,
                n_ctx=n_ctx,
                remote_free=sum(d.free_bytes for d in remote.devices),
            )
            n_ctx = min(n_ctx, loaded[0].n_ctx_train) if loaded[0].n_ctx_train > 0 else n_ctx
            if progress is not None:
                progress("target", 0.0)
                remote.keep_waiting = lambda: progress("target", 0.0)
            remote.load(target, n_gpu_layers=target_layers, n_ctx=n_ctx, n_threads=n_threads, rollback=target_rollback)
            if draft is not None:
                # An explicit list of this machine's devices: never a remote one (llama.cpp would put it first).
                loaded.append(
                    Model(
                        draft,
                        n_gpu_layers=draft_layers,
                        progress=None if progress is None else (lambda f: progress("draft", f)),
                        devices=local_devices(),
                    )
                )
            loaded[0].n_gpu_layers = target_layers
            return cls(
                loaded[0],
                loaded[1] if draft is not None else None,
                n_ctx=n_ctx,
                n_threads=n_threads,
                vocab_checked=True,
                target_context=remote,
            )
        except BaseException:
            if remote is not None:
                remote.close()
            for model in loaded:
                model.close()
            raise

    def device_bytes(self) -> int:
        """Estimated GPU memory the offloaded layers hold (weights and KV cache); 0 on the CPU."""
        if not offload_supported():
            return 0
        total = 0.0
        for model in (self.target, self.draft):
            if model is not None and model.n_gpu_layers != 0 and not (model is self.target and self.remote):
                shape = read_model_shape(model.path)
                total += layers_bytes(model.n_gpu_layers, shape.memory_bytes(self.n_ctx), shape.n_layers)
        return int(total)

    def placement(self) -> tuple[str, str | None]:
        """Where the target and the draft run, e.g. ``("GPU (all 30 layers)", "CPU")``."""
        offload = offload_supported()
        target = (
            self.remote.placement()
            if self.remote is not None
            else describe_placement(self.target.n_gpu_layers, self.target.n_layers, offload)
        )
        draft = describe_placement(self.draft.n_gpu_layers, self.draft.n_layers, offload) if self.draft else None
        return target, draft

    @property
    def n_ctx(self) -> int:
        return self.target_context.n_ctx

    @property
    def has_draft(self) -> bool:
        return self.draft is not None

    @property
    def target_name(self) -> str:
        return self.target.path.name

    @property
    def draft_name(self) -> str | None:
        return self.draft.path.name if self.draft is not None else None

    @property
    def has_mtp(self) -> bool:
        """Whether the target's own MTP heads can draft (the ``mtp`` drafter)."""
        return self.mtp_context is not None

    def close(self) -> None:
        self.prompt_cache.clear()
        for obj in (
            self.head_context,
            self.mtp_context,
            self.draft_context,
            self.target_context,
            self.draft,
            self.target,
        ):
            if obj is not None:
                obj.close()
