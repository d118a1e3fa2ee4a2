"""The runtime's own thread: loads models and runs replies, races, calibrations and served requests.

``RuntimeWorker`` lives on a QThread and is the only object that touches the
runtime (:class:`~specchat.core.runtime.runtime.Runtime`, the loaded pair):
everything that decodes runs there, one thing at a time, including the
requests of a server started from the window (:meth:`RuntimeWorker.call`).
``WindowRuntimeHost`` lives on the GUI thread, owns that thread and forwards
requests as queued signals. Cancel is a ``CancelToken`` set directly
from the GUI thread, never a queued slot: the worker's loop is busy while a
reply streams, so a queued call would only run after it ended.

A server that batches its requests (:class:`SharedBatch`) drives its batch on
this thread too; a reply sent while it does joins that batch as one more
sequence instead of waiting, where the batch can run it (a drafter that needs
nothing beside the target, no attached files). Such a reply sent while no
served request runs drives the batch itself, so requests coming meanwhile join
it rather than wait.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from PySide6.QtCore import QCoreApplication, QObject, QThread, QTimer, Signal, Slot

from specchat.core.cancel import CancelToken
from specchat.core.chat.baseline import measure_plain
from specchat.core.chat.controller import ReplyRequest as ReplyRequest  # its home moved to core
from specchat.core.chat.race import RaceRequest, run_race
from specchat.core.engine.registry import Part, drafter_entry
from specchat.core.runtime.batched import BatchedRuntime
from specchat.core.runtime.conversation import Conversation
from specchat.core.runtime.read_ahead import ReadAhead, read_ahead
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import (
    GPU_LAYERS_AUTO,
    Drafted,
    DrafterKind,
    Event,
    Finished,
    FinishReason,
    GenerationStats,
    GpuLayers,
    PromptTooLongError,
    SamplerParams,
    SpecchatError,
    TextSource,
)
from specchat.server.batch_queue import Guest

log = logging.getLogger(__name__)

BATCH_SECONDS = 0.03


@dataclass(frozen=True)
class LoadOptions:
    """How to load a pair: context size and GPU layers for each model ("auto", -1 all, 0 none, n)."""

    n_ctx: int = 4096
    n_gpu_layers: GpuLayers = GPU_LAYERS_AUTO
    draft_gpu_layers: GpuLayers = GPU_LAYERS_AUTO
    rpc_servers: tuple[str, ...] = ()  # 'specchat serve-rpc' servers for the target's layers (none: this machine)


@dataclass(frozen=True)
class TokenCountRequest:
    """The composer's prompt to count on the runtime's thread: the messages with the one being written, and
    the texts (attachments) to count one by one; ``serial`` tells a stale answer from the latest."""

    serial: int
    messages: list[dict[str, str]]
    texts: tuple[str, ...] = ()


@dataclass(frozen=True)
class TokenCount:
    """The target's count for a :class:`TokenCountRequest`: the prompt, the context size, each text."""

    serial: int
    prompt: int
    n_ctx: int
    texts: tuple[int, ...] = ()


@dataclass(frozen=True)
class ReadAheadRequest:
    """The composer's prompt to read ahead on the runtime's thread: the messages a reply would get (the history
    and the message being written, as :class:`TokenCountRequest`) and the drafter it would draft with."""

    serial: int
    messages: list[dict[str, str]]
    drafter: str | None = None


@dataclass(frozen=True)
class ReadAheadDone:
    """What a :class:`ReadAheadRequest` did (``read.finished`` False: stopped, or nothing to read)."""

    serial: int
    read: ReadAhead


@dataclass(frozen=True)
class ModelInfo:
    """What is loaded, as the GUI shows it."""

    target_path: str
    draft_path: str
    target_name: str
    draft_name: str | None
    target_placement: str = "CPU"  # e.g. "CPU", "GPU (all 30 layers)"
    draft_placement: str = ""
    gpu_bytes: int = 0  # estimated GPU memory the pair holds (freed before the next load)
    n_ctx: int = 0  # the context size the engine got (at most the target's trained length)
    # The parts beside the target that drafters can use (registry Part values); None: a draft model if one
    # is named, nothing else.
    parts: frozenset[str] | None = None

    @property
    def offered(self) -> frozenset[str]:
        """The loaded pair's parts (what :func:`~specchat.core.engine.registry.available_drafters` reads)."""
        if self.parts is not None:
            return self.parts
        return frozenset({Part.DRAFT_MODEL.value}) if self.draft_name else frozenset()

    @property
    def has_mtp(self) -> bool:
        """Whether the target's own MTP heads are loaded and can draft."""
        return Part.MTP_HEADS.value in self.offered

    @property
    def pair_key(self) -> str:
        return f"{self.target_path}|{self.draft_path}"


STOP_CHECK_SECONDS = 0.1  # while a call from another thread waits for the runtime's: how often it checks cancel
WAITED_MESSAGE = "stopped while waiting for a served request"


class Closable(Protocol):
    def close(self) -> None: ...


class SharedBatch(Protocol):
    """A server whose batch runs on the runtime's thread and takes the window's reply as one more sequence
    (:class:`specchat.server.batch_queue.BatchedRequestQueue` with the worker as its owner)."""

    batch: BatchedRuntime

    def join(self, guest: Guest) -> bool:
        """Start ``guest`` at the batch's next round; False when no batch runs now."""
        ...

    def host(self, guest: Guest) -> None:
        """Run ``guest`` in the batch now, on this thread, with the requests that come meanwhile."""
        ...


def batch_drafter(drafter: str) -> str:
    """The drafter a window reply drafting with ``drafter`` uses in the served requests' batch: Automatic drafts by
    lookup there (measured on a 2-core CPU, Automatic's own choice between lookup and the shared draft model in a
    batch realised 0.77-0.90x lookup's rate at 2-8 requests: docs/benchmarks.md), the others as they are."""
    return DrafterKind.NGRAM.value if drafter == DrafterKind.COMPOSITE.value else drafter


def batch_refusal(request: ReplyRequest, batch: BatchedRuntime) -> str:
    """Why ``request`` cannot join the served requests' ``batch``, as the end of a status line; "" when it can."""
    if not batch.batchable(batch_drafter(request.drafter)):
        name = drafter_entry(request.drafter).key
        return f"the {name} drafter does not join their batch ({' or '.join(sorted(batch.drafters))} does)"
    if request.attachments:
        return "a reply with attached files does not join their batch"
    return ""


@dataclass(eq=False)
class Turn:
    """Something queued for the runtime's thread: it starts there, or is dropped first (cancelled, or closing)."""

    cancel: CancelToken
    call: Callable[[], None] | None = None  # a call from another thread (a served request); None: a reply
    state: str = "queued"  # queued -> started | dropped
    waited: bool = False  # a reply told the window it waits for a served request
    done: threading.Event = field(default_factory=threading.Event)


class RuntimeWorker(QObject):
    """Owns the runtime on its thread: every decode (replies, races, calibrations, served requests) runs here."""

    load_progress = Signal(str, float)
    loaded = Signal(object)  # ModelInfo
    load_failed = Signal(str)
    events = Signal(list)  # a batch of Drafted / Verified / Finished
    prompt_progress = Signal(int, int)  # a long prompt's tokens read so far, of how many
    failed = Signal(str)  # a reply could not start or broke; one line
    baseline_measured = Signal(object)  # Baseline
    raced = Signal(object, object)  # RaceRequest, RaceRecord: plain decoding's run for a race
    race_failed = Signal(object, str)  # RaceRequest, one line (also when cancelled)
    race_progress = Signal(object, object)  # RaceRequest, RaceProgress: after every block and a few times a second
    waiting = Signal(bool)  # a reply waits while a served request decodes (True), has the runtime now (False)
    waiting_because = Signal(str)  # just before waiting(True): why the reply could not join the served batch
    tokens_counted = Signal(object)  # TokenCount: the composer's prompt and attachments, counted by the target
    read_ahead_chunk = Signal(int, str, int, int)  # serial, context ("target", "draft"), tokens held, of how many
    read_ahead_done = Signal(object)  # ReadAheadDone: the composer's prompt read ahead (or stopped)
    _called = Signal(object)  # a Turn with a call from another thread, queued to this one
    _released = Signal(object)  # a part built on the runtime by others, to close on this thread

    def __init__(self) -> None:
        super().__init__()
        self.runtime: Runtime | None = None
        self.info: ModelInfo | None = None
        self._session: Conversation | None = None
        self._session_conversation = -1
        self.lookup_texts: list[str] | None = None  # the lookup memory's texts, kept for the next pair too
        self._turns_lock = threading.Lock()
        self._replies: list[Turn] = []  # replies queued for this thread, not started yet
        self.serving = False  # a call from another thread (a served request) runs on this thread now
        self.shared: SharedBatch | None = None  # the window's server, when it batches its requests on this thread
        self._closed = False
        self._parts: list[Closable] = []  # built on the runtime by others (the server's batch): closed before it
        self._ahead = CancelToken()  # the latest read ahead's: anything else for this thread sets it first
        self._ahead_tokens: list[int] | None = None  # what the target held after the latest read ahead
        self._called.connect(self._run_call)  # queued: it is emitted from other threads
        self._released.connect(self._close_part)  # queued: after whatever runs on this thread now

    # --- calls from other threads (the window's server) -------------------------
    def call(self, call: Callable[[], None], cancel: CancelToken) -> bool:
        """Run ``call`` on this worker's thread, between its other work, and wait for it (from another thread).

        False when it did not run: ``cancel`` was set while it waited, or the worker is closing.
        """
        turn = Turn(cancel, call)
        with self._turns_lock:
            if self._closed:
                return False
        self.stop_read_ahead()  # a served request never waits for more than one chunk of it
        self._called.emit(turn)
        while not turn.done.wait(STOP_CHECK_SECONDS):
            if (cancel.cancelled or self._closed) and self._drop(turn):
                return False
        return turn.state == "started"

    @Slot(object)
    def _run_call(self, turn: Turn) -> None:
        assert turn.call is not None
        with self._turns_lock:
            if turn.state != "queued":
                return
            turn.state = "started"
            self.serving = True
            newly = [t for t in self._replies if not t.waited]
            for t in newly:
                t.waited = True
        if newly:
            self.waiting.emit(True)
        try:
            turn.call()
        finally:
            self._session = None  # the contexts now hold the call's tokens
            with self._turns_lock:
                self.serving = False
            turn.done.set()

    def _drop(self, turn: Turn) -> bool:
        """Drop ``turn`` unless it started; whether it was dropped."""
        with self._turns_lock:
            if turn.state == "started":
                return False
            turn.state = "dropped"
            if turn in self._replies:
                self._replies.remove(turn)
            turn.done.set()
            return True

    def queue_reply(self, turn: Turn, request: ReplyRequest | None = None) -> None:
        """Called on the GUI thread before a reply is queued: while a served request runs, it joins the served
        requests' batch where it can (``turn`` then starts at once), else it waits and says so."""
        why = ""
        with self._turns_lock:
            serving, shared = self.serving, self.shared
        if serving and shared is not None and request is not None:
            why = batch_refusal(request, shared.batch)
            if not why and shared.join(Guest(partial(self._start_guest, request, turn), self.events.emit)):
                with self._turns_lock:
                    turn.state = "started"
                return
        with self._turns_lock:
            self._replies.append(turn)
            if self.serving:
                turn.waited = True
        if turn.waited:
            if why:
                self.waiting_because.emit(why)
            self.waiting.emit(True)

    def _start_guest(self, request: ReplyRequest, turn: Turn, batch: BatchedRuntime) -> int | None:
        """On this thread, at the batch's round boundary: read the reply's prompt into ``batch``; its key, or None
        once it has ended (it has said so)."""
        if self.runtime is None:
            self.failed.emit("no model is loaded")
            return None
        if turn.cancel.cancelled:
            self.events.emit([Finished(FinishReason.CANCELLED, GenerationStats(), "stopped before it started")])
            return None
        self._session = None  # the batch's sequence holds this turn: the next lone reply reads its conversation
        user = [{"role": "user", "content": request.user_text}] if request.user_text is not None else []
        try:
            prompt = self.runtime.prompt(request.history + user, continuation=request.continuation)
            key, early = batch.admit(
                prompt, request.params, drafter=batch_drafter(request.drafter), depth=request.depth, cancel=turn.cancel
            )
        except SpecchatError as exc:
            self.failed.emit(str(exc))
            return None
        if early is not None:
            self.events.emit([early])
            return None
        return key

    def drop_waiting_replies(self) -> None:
        """Called on the GUI thread while a reply waits for a served request: one whose Stop was pressed ends."""
        with self._turns_lock:
            dropped = [t for t in self._replies if t.waited and t.cancel.cancelled]
        for turn in dropped:
            if self._drop(turn):
                self.waiting.emit(False)
                self.events.emit([Finished(FinishReason.CANCELLED, GenerationStats(), WAITED_MESSAGE)])

    def adopt(self, part: Closable) -> None:
        """Keep ``part`` (built on the runtime by another object, e.g. the server's batch) until :meth:`release`,
        or until the runtime closes: it is closed first."""
        with self._turns_lock:
            self._parts.append(part)

    def release(self, part: Closable) -> None:
        """Close ``part`` on this thread once what runs here now has ended (called from any thread)."""
        self._released.emit(part)

    @Slot(object)
    def _close_part(self, part: Closable) -> None:
        with self._turns_lock:
            if part not in self._parts:
                return
            self._parts.remove(part)
        part.close()

    def close_calls(self) -> None:
        """Calls from other threads no longer run here (the thread is stopping)."""
        with self._turns_lock:
            self._closed = True

    # --- reading the composer's prompt ahead ----------------------------------------
    def begin_read_ahead(self) -> CancelToken:
        """From any thread: stop the read ahead under way, and a token for the next one."""
        token = CancelToken()
        with self._turns_lock:
            self._ahead.cancel()
            self._ahead = token
        return token

    def stop_read_ahead(self) -> None:
        """From any thread: stop the read ahead under way (it ends within one chunk) or queued."""
        with self._turns_lock:
            self._ahead.cancel()

    @Slot(object, object)
    def read_ahead(self, request: ReadAheadRequest, cancel: CancelToken) -> None:
        """Read the prompt a reply to ``request.messages`` would get into the target's and the draft's contexts,
        in chunks, until ``cancel`` (:mod:`specchat.core.runtime.read_ahead`); a reply that follows reads only
        what changed since. A prompt the template refuses or the context cannot hold is left for Send to say."""
        runtime = self.runtime
        if runtime is None or cancel.cancelled:
            self.read_ahead_done.emit(ReadAheadDone(request.serial, ReadAhead(0)))
            return
        try:
            prompt = runtime.prompt(request.messages)
        except SpecchatError:
            self.read_ahead_done.emit(ReadAheadDone(request.serial, ReadAhead(0)))
            return
        # A context the read ahead left as it was is not kept again: only what else it held (a reply, a served
        # request) goes to the prompt cache before the read cuts it.
        recall = self._ahead_tokens is None or runtime.target_context.tokens != self._ahead_tokens
        try:
            done = read_ahead(
                runtime,
                prompt,
                cancel,
                drafter=request.drafter,
                recall=recall,
                on_chunk=lambda name, held, total: self.read_ahead_chunk.emit(request.serial, name, held, total),
            )
        except SpecchatError as exc:  # a failed decode: the reply reads the prompt itself
            log.warning("reading the prompt ahead failed: %s", exc)
            runtime.forget_contexts()
            self._ahead_tokens = None
            self.read_ahead_done.emit(ReadAheadDone(request.serial, ReadAhead(len(prompt.tokens) - 1)))
            return
        self._ahead_tokens = list(runtime.target_context.tokens)
        self.read_ahead_done.emit(ReadAheadDone(request.serial, done))

    # --- the window's own work ---------------------------------------------------
    @Slot(str, str, object, object)
    def load(self, target: str, draft: str, options: LoadOptions, cancel: CancelToken) -> None:
        self.close_runtime()

        def progress(stage: str, fraction: float) -> bool:
            self.load_progress.emit(stage, float(fraction))
            return not cancel.cancelled

        try:
            runtime = Runtime.load(
                target,
                draft or None,
                n_ctx=options.n_ctx,
                n_gpu_layers=options.n_gpu_layers,
                draft_gpu_layers=options.draft_gpu_layers,
                progress=progress,
                rpc_servers=options.rpc_servers,
            )
        except SpecchatError as exc:
            self.load_failed.emit(str(exc))
            return
        except Exception as exc:
            log.exception("model load failed")
            self.load_failed.emit(f"could not load the models: {exc}")
            return
        if cancel.cancelled:
            runtime.close()
            self.load_failed.emit("loading was cancelled")
            return
        self.runtime = runtime
        runtime.set_lookup_memory(self.lookup_texts)
        target_placement, draft_placement = runtime.placement()
        try:
            gpu_bytes = runtime.device_bytes()
        except Exception:
            log.exception("could not estimate the pair's GPU memory")
            gpu_bytes = 0
        self.info = ModelInfo(
            target,
            draft,
            runtime.target_name,
            runtime.draft_name,
            target_placement,
            draft_placement or "",
            gpu_bytes,
            runtime.n_ctx,
            runtime.offered,
        )
        self.loaded.emit(self.info)

    @Slot(object, object)
    def load_demo(self, options: LoadOptions, cancel: CancelToken) -> None:
        """Provision the offline demo pair (converting its target on first use), then load it."""
        from specchat.core.models.demo import provision_demo_pair

        self.load_progress.emit("preparing the demo pair", 0.0)
        try:
            pair = provision_demo_pair()
        except SpecchatError as exc:
            self.load_failed.emit(str(exc))
            return
        except Exception as exc:
            log.exception("demo pair provisioning failed")
            self.load_failed.emit(f"could not prepare the demo pair: {exc}")
            return
        self.load(str(pair.target), str(pair.draft), options, cancel)

    @Slot(object, object)
    def generate(self, request: ReplyRequest, turn: Turn) -> None:
        with self._turns_lock:
            if turn.state != "queued":  # Stop ended its wait for a served request: it has been answered
                return
            turn.state = "started"
            self._replies.remove(turn)
        if turn.waited:
            self.waiting.emit(False)
        shared = self.shared
        if shared is not None and self.runtime is not None and not batch_refusal(request, shared.batch):
            # Served in a batch: the reply drives it, so that requests coming meanwhile join it.
            shared.host(Guest(partial(self._start_guest, request, turn), self.events.emit))
            return
        self._generate(request, turn.cancel)

    def _generate(self, request: ReplyRequest, cancel: CancelToken) -> None:
        if self.runtime is None:
            self.failed.emit("no model is loaded")
            return
        if cancel.cancelled:  # stopped before it started: an ordinary stop, not an error
            self.events.emit([Finished(FinishReason.CANCELLED, GenerationStats(), "stopped before it started")])
            return
        try:
            session = self._session_for(request)
            stream = session.reply(
                request.user_text,
                request.params,
                drafter=request.drafter,
                depth=request.depth,
                cancel=cancel,
                continuation=request.continuation,
                progress=self.prompt_progress.emit,
                # The conversation's files: lookup drafts from each by name ("lookup in report.pdf").
                sources=[TextSource(a.name, a.text, "attachment") for a in request.attachments],
            )
            self._pump(stream)
        except SpecchatError as exc:
            self._session = None
            self.failed.emit(str(exc))
        except Exception as exc:
            log.exception("generation failed")
            self._session = None
            self.failed.emit(f"generation failed: {exc}")

    def _pump(self, stream: Iterable[Event]) -> None:
        """Forward events in batches: after each draft (so ghost text shows during verify), else every 30 ms."""
        batch: list[Event] = []
        last = time.monotonic()
        for event in stream:
            batch.append(event)
            now = time.monotonic()
            if (
                isinstance(event, Finished)
                or (isinstance(event, Drafted) and event.tokens)
                or now - last >= BATCH_SECONDS
            ):
                self.events.emit(batch)
                batch = []
                last = now
        if batch:
            self.events.emit(batch)

    def _session_for(self, request: ReplyRequest) -> Conversation:
        assert self.runtime is not None
        session = self._session
        if (
            session is not None
            and self._session_conversation == request.conversation_id
            and session.messages[: len(request.history)] == request.history
        ):
            session.truncate_messages(len(request.history))
            return session
        self._session = Conversation(self.runtime, request.history)
        self._session_conversation = request.conversation_id
        return self._session

    @Slot(str, object, object)
    def measure_baseline(self, key: str, sampler: SamplerParams, cancel: CancelToken) -> None:
        """Time plain decoding (no drafter) on this pair with the window's sampler, for the speed-up figure."""
        if self.runtime is None:
            return
        try:
            baseline = measure_plain(self.runtime, key, sampler, cancel)
        except SpecchatError as exc:
            log.warning("baseline measurement failed: %s", exc)
            return
        finally:
            self._session = None  # the contexts now hold the calibration's tokens
        if baseline is not None:
            self.baseline_measured.emit(baseline)

    @Slot(object, object)
    def race(self, request: RaceRequest, cancel: CancelToken) -> None:
        """Race a reply: its prompt decoded speculatively and plainly, in turns; the conversation is untouched."""
        if self.runtime is None:
            self.race_failed.emit(request, "load the pair to race plain decoding")
            return
        try:
            record = run_race(self.runtime, request, cancel, lambda p: self.race_progress.emit(request, p))
        except SpecchatError as exc:
            self.race_failed.emit(request, f"the race could not run: {exc}")
            return
        except Exception as exc:
            log.exception("race failed")
            self.race_failed.emit(request, f"the race could not run: {exc}")
            return
        finally:
            self._session = None  # the contexts now hold the plain run's tokens
        if record is None:
            self.race_failed.emit(request, "the race was stopped")
        else:
            self.raced.emit(request, record)

    def close_runtime(self) -> None:
        self._session = None
        self._ahead_tokens = None
        with self._turns_lock:
            parts, self._parts = self._parts, []
        for part in parts:
            part.close()
        if self.runtime is not None:
            self.runtime.close()
            self.runtime = None
            self.info = None

    @Slot(object)
    def count_tokens(self, request: TokenCountRequest) -> None:
        """Count the composer's prompt (``request.messages``, through the chat template) and each of
        ``request.texts`` with the loaded target's tokenizer; nothing is emitted without a loaded pair."""
        runtime = self.runtime
        if runtime is None:
            return
        try:
            prompt = len(runtime.prompt(request.messages).tokens)
        except PromptTooLongError as exc:
            prompt = exc.tokens
        except SpecchatError:
            return  # a message list the template refuses: the window keeps its estimate
        texts = tuple(len(runtime.target.tokenize(t, add_special=False, parse_special=False)) for t in request.texts)
        self.tokens_counted.emit(TokenCount(request.serial, prompt, runtime.n_ctx, texts))

    @Slot(object)
    def set_lookup_memory(self, texts: list[str] | None) -> None:
        """Let the composite drafter's lookup also search ``texts`` (None: only the conversation)."""
        self.lookup_texts = texts
        if self.runtime is not None:
            self.runtime.set_lookup_memory(texts)


class WindowRuntimeHost(QObject):
    """GUI-side owner of the runtime's thread; every method is called on the GUI thread."""

    # The worker's ``waiting`` and ``waiting_because``, always delivered on the GUI thread (emitted from either).
    waiting = Signal(bool)
    waiting_because = Signal(str)

    _load = Signal(str, str, object, object)
    _lookup_memory = Signal(object)
    _load_demo = Signal(object, object)
    _generate = Signal(object, object)
    _baseline = Signal(str, object, object)
    _race = Signal(object, object)
    _count = Signal(object)
    _read_ahead = Signal(object, object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.runtime_thread = QThread()
        self.runtime_thread.setObjectName("specchat-runtime")
        self.worker = RuntimeWorker()
        self.worker.moveToThread(self.runtime_thread)
        self._load.connect(self.worker.load)
        self._lookup_memory.connect(self.worker.set_lookup_memory)
        self._load_demo.connect(self.worker.load_demo)
        self._generate.connect(self.worker.generate)
        self._baseline.connect(self.worker.measure_baseline)
        self._race.connect(self.worker.race)
        self._count.connect(self.worker.count_tokens)
        self._read_ahead.connect(self.worker.read_ahead)
        self.worker.waiting_because.connect(self.waiting_because)
        self.worker.waiting.connect(self.waiting)
        # While a reply waits for a served request, Stop (its token set) ends the wait within this period.
        self._stop_check = QTimer(self)
        self._stop_check.setInterval(int(STOP_CHECK_SECONDS * 1000))
        self._stop_check.timeout.connect(self._drop_stopped_replies)
        self.waiting.connect(lambda waits: self._stop_check.start() if waits else self._stop_check.stop())
        self._tokens: list[CancelToken] = []
        self._closed = False
        self.runtime_thread.start()
        app = QCoreApplication.instance()
        if app is not None:  # never leave a running QThread behind at exit
            app.aboutToQuit.connect(self.shutdown)

    def _drop_stopped_replies(self) -> None:
        self.worker.drop_waiting_replies()  # called from here: on the GUI thread, not queued to the busy worker

    def load(self, target: str, draft: str = "", options: LoadOptions | None = None) -> None:
        self.worker.stop_read_ahead()
        self._load.emit(target, draft, options or LoadOptions(), self._token())

    def load_demo(self, options: LoadOptions | None = None) -> None:
        self.worker.stop_read_ahead()
        self._load_demo.emit(options or LoadOptions(), self._token())

    def set_lookup_memory(self, texts: list[str] | None) -> None:
        """Hand the lookup memory's texts (None: off) to the runtime's thread; they outlive a reload."""
        self._lookup_memory.emit(texts)

    def generate(self, request: ReplyRequest) -> CancelToken:
        self.worker.stop_read_ahead()  # set here, on the GUI thread: the reply waits for one chunk at most
        token = self._token()
        turn = Turn(token)
        self.worker.queue_reply(turn, request)
        if turn.state == "queued":  # else it joined the served requests' batch
            self._generate.emit(request, turn)
        return token

    def measure_baseline(self, key: str, sampler: SamplerParams) -> None:
        """Calibrate plain decoding for ``key`` (the pair and its settings) on the runtime's thread."""
        self.worker.stop_read_ahead()
        self._baseline.emit(key, sampler, self._token())

    def race(self, request: RaceRequest) -> CancelToken:
        """Run plain decoding for a race on the runtime's thread (``worker.raced`` or ``worker.race_failed``)."""
        self.worker.stop_read_ahead()
        token = self._token()
        self._race.emit(request, token)
        return token

    def count_tokens(self, request: TokenCountRequest) -> None:
        """Count the composer's prompt on the runtime's thread, between replies (``worker.tokens_counted``)."""
        self._count.emit(request)

    def read_ahead(self, request: ReadAheadRequest) -> CancelToken:
        """Read the composer's prompt ahead on the runtime's thread (``worker.read_ahead_done``); the one before
        stops. Anything else this host sends the runtime's thread, and a served request, stops it too."""
        token = self.worker.begin_read_ahead()
        self._read_ahead.emit(request, token)
        return token

    def stop_read_ahead(self) -> None:
        """Stop the composer's read ahead (within one chunk): the text changed, the conversation switched."""
        self.worker.stop_read_ahead()

    def cancel(self) -> None:
        """Stop whatever runs or waits on the runtime's thread (takes effect within one round)."""
        self.worker.stop_read_ahead()
        for token in self._tokens:
            token.cancel()
        self._tokens.clear()

    def _token(self) -> CancelToken:
        token = CancelToken()
        self._tokens = [t for t in self._tokens if not t.cancelled][-8:] + [token]
        return token

    def shutdown(self) -> None:
        """Cancel, stop the thread, wait for it, then free the models. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.cancel()
        self.worker.close_calls()
        self.runtime_thread.quit()
        self.runtime_thread.wait()
        self.worker.close_runtime()  # the thread has ended: no other thread can touch the runtime now
