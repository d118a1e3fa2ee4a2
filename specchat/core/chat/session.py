"""Loaded models and conversations on them.

``ChatEngine`` owns the llama.cpp models and contexts (use it from one
thread). ``ChatSession`` is one conversation: it renders the chat template,
reuses the KV cache of the common prefix on both models between turns, and
streams each reply as engine events.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from specchat.core.cancel import CancelToken
from specchat.core.chat.template import ChatTemplate, validate_messages
from specchat.core.distributed import require_rpc
from specchat.core.engine.composite import CompositeDrafter
from specchat.core.engine.depth import AdaptiveDepth, DepthControl
from specchat.core.engine.drafters import Drafter
from specchat.core.engine.registry import make_drafter
from specchat.core.engine.speculative import TargetSide, generate
from specchat.core.llama.context import (
    Context,
    MemoryInfo,
    MtpContext,
    check_memory_support,
    common_prefix_len,
    probe_memory,
)
from specchat.core.llama.devices import offload_supported
from specchat.core.llama.heads import DFlashContext, Eagle3Context, open_draft
from specchat.core.llama.model import Model, vocab_mismatch
from specchat.core.llama.remote_target import RemoteTarget
from specchat.core.llama.rpc import local_devices
from specchat.core.models.placement import describe_placement, layers_bytes, resolve_gpu_layers, resolve_remote_layers
from specchat.core.models.shape import read_model_shape
from specchat.core.remote import DEFAULT_DEADLINE
from specchat.core.types import (
    GPU_LAYERS_AUTO,
    MAX_DEPTH,
    DrafterKind,
    Event,
    Finished,
    FinishReason,
    GenerationParams,
    GenerationStats,
    GpuLayers,
    SpecchatError,
    Verified,
)

LoadProgress = Callable[[str, float], bool]
PromptProgress = Callable[[int, int], None]  # prompt tokens in the target's cache so far, of how many
PROMPT_STEP = 256  # a long prompt is read in steps of this many tokens, reporting and checking Stop between them


def model_memory(path: str | Path) -> MemoryInfo:
    """Whether ``path`` is a dense, hybrid or recurrent model and how it takes drafts back (no weights read)."""
    return probe_memory(path)


class ChatEngine:
    """A target model (and optionally a draft model) with one context each."""

    def __init__(self, target: Model, draft: Model | None, *, n_ctx: int = 4096, n_threads: int | None = None,
                 vocab_checked: bool = False, target_rollback: int = MAX_DEPTH,
                 target_context: RemoteTarget | None = None) -> None:
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
            target, n_ctx=n_ctx, n_threads=n_threads, rollback=target_rollback)
        self.draft_context: Context | None = None
        self.mtp_context: MtpContext | None = None
        self.head_context: Eagle3Context | DFlashContext | None = None  # a head loaded as the draft
        try:
            self.draft_context, self.head_context = open_draft(self.target_context, draft, n_ctx=n_ctx,
                                                               n_threads=n_threads)
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
        self._adaptive: dict[DrafterKind, AdaptiveDepth] = {}
        # The composite drafter learns which source wins per round; like the costs, that outlives a reply.
        self._composite: CompositeDrafter | None = None
        self.lookup_memory: np.ndarray | None = None  # token ids the composite's lookup also searches

    def set_lookup_memory(self, texts: Iterable[str] | None) -> None:
        """Let the composite drafter's lookup also search ``texts`` (None: only the conversation)."""
        if texts is None:
            self.lookup_memory = None
        else:
            ids = [t for text in texts for t in self.target.tokenize(text, parse_special=False)]
            self.lookup_memory = np.asarray(ids, dtype=np.int64) if ids else None
        if self._composite is not None:
            self._composite.memory = self.lookup_memory

    def drafter_for(self, kind: DrafterKind) -> Drafter:
        """A drafter of ``kind`` on this pair; the composite one is kept, with what it learned, between replies."""
        if kind is not DrafterKind.COMPOSITE:
            return make_drafter(kind, self.draft_context, self.mtp_context, self.head_context)
        if self._composite is None:
            drafter = make_drafter(kind, self.draft_context, self.mtp_context, self.head_context)
            assert isinstance(drafter, CompositeDrafter)
            self._composite = drafter
        self._composite.memory = self.lookup_memory
        return self._composite

    def adaptive_for(self, drafter: DrafterKind) -> AdaptiveDepth:
        """The adaptive depth controller for this pair and drafter (created on first use)."""
        return self._adaptive.setdefault(drafter, AdaptiveDepth())

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
    ) -> ChatEngine:
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
            return cls._load_remote(target, draft, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers,
                                    draft_gpu_layers=draft_gpu_layers, n_threads=n_threads, progress=progress,
                                    target_rollback=target_rollback, servers=rpc_servers, deadline=rpc_deadline)

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
            return cls(target_model, draft_model, n_ctx=n_ctx, n_threads=n_threads, vocab_checked=True,
                       target_rollback=target_rollback)
        except BaseException:
            # Free the weights (gigabytes, perhaps on the GPU) now, not when the traceback is collected.
            for model in loaded:
                model.close()
            raise

    @classmethod
    def _load_remote(cls, target: str | Path, draft: str | Path | None, *, n_ctx: int, n_gpu_layers: GpuLayers,
                     draft_gpu_layers: GpuLayers, n_threads: int | None, progress: LoadProgress | None,
                     target_rollback: int, servers: tuple[str, ...], deadline: float) -> ChatEngine:
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
            remote = RemoteTarget(servers, deadline=deadline,
                                  keep_waiting=None if progress is None else (lambda: progress("connecting", 0.0)))
            # Servers are given to hold the target's layers: "none" (the API's default) means as many as fit.
            target_layers, draft_layers = resolve_remote_layers(
                target, draft, n_gpu_layers or GPU_LAYERS_AUTO, draft_gpu_layers, n_ctx=n_ctx,
                remote_free=sum(d.free_bytes for d in remote.devices))
            n_ctx = min(n_ctx, loaded[0].n_ctx_train) if loaded[0].n_ctx_train > 0 else n_ctx
            if progress is not None:
                progress("target", 0.0)
                remote.keep_waiting = lambda: progress("target", 0.0)
            remote.load(target, n_gpu_layers=target_layers, n_ctx=n_ctx, n_threads=n_threads,
                        rollback=target_rollback)
            if draft is not None:
                # An explicit list of this machine's devices: never a remote one (llama.cpp would put it first).
                loaded.append(Model(draft, n_gpu_layers=draft_layers, progress=None if progress is None else
                                    (lambda f: progress("draft", f)), devices=local_devices()))
            loaded[0].n_gpu_layers = target_layers
            return cls(loaded[0], loaded[1] if draft is not None else None, n_ctx=n_ctx, n_threads=n_threads,
                       vocab_checked=True, target_context=remote)
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
        target = (self.remote.placement() if self.remote is not None
                  else describe_placement(self.target.n_gpu_layers, self.target.n_layers, offload))
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

    def tokenize_prompt(self, messages: list[dict[str, str]], continuation: str = "") -> tuple[str, list[int]]:
        """The prompt for a reply to ``messages``; with ``continuation``, the reply so far follows it."""
        text = self.template.render(messages) + continuation
        # Checked before tokenizing: a prompt of 100 MB took minutes and gigabytes to be refused after it.
        fewest = self.target.fewest_tokens(len(text.encode("utf-8"))) if len(text) >= self.n_ctx else 0
        if fewest >= self.n_ctx:
            raise SpecchatError(
                f"the conversation is at least {fewest:,} tokens but the context holds {self.n_ctx}; "
                "start a new conversation or raise the context size"
            )
        tokens = self.target.tokenize(text, add_special=True, parse_special=True)
        if len(tokens) >= self.n_ctx:
            raise SpecchatError(
                f"the conversation is {len(tokens)} tokens but the context holds {self.n_ctx}; "
                "start a new conversation or raise the context size"
            )
        return text, tokens

    @property
    def has_mtp(self) -> bool:
        """Whether the target's own MTP heads can draft (DrafterKind.MTP)."""
        return self.mtp_context is not None

    def close(self) -> None:
        for obj in (self.head_context, self.mtp_context, self.draft_context, self.target_context, self.draft,
                    self.target):
            if obj is not None:
                obj.close()


class ChatSession:
    """One conversation on an engine."""

    def __init__(self, engine: ChatEngine, messages: list[dict[str, str]] | None = None) -> None:
        self.engine = engine
        self.messages: list[dict[str, str]] = [dict(m) for m in messages or []]
        self.adaptive = engine.adaptive_for(DrafterKind.DRAFT_MODEL)
        self.last_prompt_text = ""
        self.last_tokens: list[int] = []

    def reply(
        self,
        user_text: str | None,
        params: GenerationParams,
        *,
        drafter: DrafterKind = DrafterKind.DRAFT_MODEL,
        depth: DepthControl | None = None,
        cancel: CancelToken | None = None,
        continuation: str = "",
        progress: PromptProgress | None = None,
    ) -> Iterator[Event]:
        """Add ``user_text`` (if given) and stream the assistant's reply.

        With ``continuation`` (a reply cut at the token limit) the reply goes on from that text: it
        ends the prompt, and the assistant message stored in the session is that text and what follows.
        With ``progress``, a prompt with more than two steps to read is read step by step, each reported.
        Checks run before the first event: a bad message list, a prompt that
        does not fit or a missing draft raise SpecchatError here and leave the
        conversation unchanged.
        """
        messages = self.messages + ([{"role": "user", "content": user_text}] if user_text is not None else [])
        validate_messages(messages)
        if messages[-1]["role"] != "user":
            raise SpecchatError("the last message must be from the user to get a reply")
        prompt_text, prompt = self.engine.tokenize_prompt(messages, continuation)
        chosen = self.engine.drafter_for(drafter)
        self.adaptive = self.engine.adaptive_for(drafter)
        self.messages = messages
        self.last_prompt_text = prompt_text
        return self._stream(prompt, params, chosen, depth, cancel, continuation, progress)

    def _read_prompt(self, prompt: list[int], progress: PromptProgress,
                     cancel: CancelToken | None) -> tuple[int, float] | None:
        """Bring the target to a long prompt step by step, reporting each; (reused, seconds), None if short.

        The speculative loop's own prefill then finds the prompt in the cache and decodes nothing more.
        """
        target = self.engine.target_context
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

    def _stream(self, prompt: list[int], params: GenerationParams, drafter: Drafter,
                depth: DepthControl | None, cancel: CancelToken | None, continuation: str = "",
                progress: PromptProgress | None = None) -> Iterator[Event]:
        pieces: list[str] = [continuation]
        tokens: list[int] = []
        if self.engine.remote is not None:  # Stop also ends a wait on a server that does not answer
            self.engine.remote.keep_waiting = None if cancel is None else (lambda: not cancel.cancelled)
        try:
            read = self._read_prompt(prompt, progress, cancel) if progress is not None else None
            if read is not None and cancel is not None and cancel.cancelled:
                stream: Iterable[Event] = [Finished(FinishReason.CANCELLED, GenerationStats(prompt_tokens=len(prompt)),
                                                    "stopped while reading the prompt")]
            else:
                stream = generate(self.engine.target_side, drafter, prompt, params,
                                  depth=depth, cancel=cancel, adaptive=self.adaptive)
            for event in stream:
                if isinstance(event, Verified):
                    pieces.append(event.text)
                    tokens.extend(event.committed)
                if isinstance(event, Finished):
                    if read is not None:  # the prompt was read before the loop: its figures are those steps'
                        event.stats.reused_prompt_tokens = read[0]
                        event.stats.prompt_seconds += read[1]
                    if event.reason is FinishReason.ERROR:
                        self._forget_caches()
                    self.last_tokens = tokens
                    self.messages.append({"role": "assistant", "content": "".join(pieces)})
                yield event
        except SpecchatError as exc:  # before the reply began: it has no figures yet
            self._forget_caches()
            self.last_tokens = tokens
            self.messages.append({"role": "assistant", "content": "".join(pieces)})
            yield Finished(FinishReason.ERROR, GenerationStats(), str(exc))

    def _forget_caches(self) -> None:
        """After an error the caches may be mid-round: forget them so the next turn starts clean."""
        self.engine.target_context.truncate(0)
        if self.engine.draft_context is not None:
            self.engine.draft_context.truncate(0)

    def truncate_messages(self, n: int) -> None:
        """Keep only the first ``n`` messages (edit-and-resend, regenerate)."""
        del self.messages[n:]
