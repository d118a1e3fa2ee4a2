"""The loaded pair behind the server: one decode at a time, on one thread, in arrival order.

This is the server's only contact with the runtime, through the one reply
path every front end takes (``Runtime.prompt``, ``Runtime.stream``). Requests
wait in a bounded FIFO queue; a full queue is a 429. Every request runs on the
same runtime, whose target and draft contexts keep the previous request's
tokens, and whose prompt cache keeps earlier ones: the next prompt decodes only
what differs from its longest common prefix with them (the lookup drafter
reads the whole sequence each round, so it needs no index). A cancelled
request (its client gone, its time up) stops within one round, or between the
steps of reading a long prompt; the caches are resynchronised by common prefix,
so it leaves nothing inconsistent.

One thread owns the runtime. For ``specchat serve`` that is this host's own
thread; in the window it is the window's runtime thread, and this host hands
each request to it (``owner``) and waits for it to run there.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from specchat.core.cancel import CancelToken
from specchat.core.engine.depth import DepthControl
from specchat.core.engine.registry import default_drafter, resolve
from specchat.core.types import (
    PREDICTION_NAME,
    Drafted,
    Finished,
    FinishReason,
    GenerationStats,
    PromptTooLongError,
    SpecchatError,
    Verified,
)
from specchat.server.errors import ApiError
from specchat.server.protocol import Request

if TYPE_CHECKING:
    from specchat.core.runtime.runtime import Prompt, Runtime


SHUTTING_DOWN = "the server is shutting down"


def shutting_down() -> ApiError:
    """The answer to a request the stopping server will not run (the connection closes after it)."""
    return ApiError(
        503,
        f"{SHUTTING_DOWN}; send the request again once it is back",
        code="server_shutting_down",
        headers={"Connection": "close"},
    )


@dataclass(frozen=True)
class Started:
    """The request left the queue: its prompt is tokenized and the drafter chosen."""

    prompt_tokens: int
    drafter: str  # a name in specchat.core.engine.registry.DRAFTERS
    queued_seconds: float


Emitted = Started | Verified | Finished | ApiError
Listener = Callable[["Job", "Emitted | Drafted"], None]  # called on the runtime's thread, for every request
# Runs a call on the thread that owns the runtime and waits for it; False when it did not run (the token was
# cancelled while it waited, or the owner is closing).
RuntimeOwner = Callable[[Callable[[], None], CancelToken], bool]


@dataclass
class Job:
    """One request on its way through the queue; ``emit`` is called from the engine's thread."""

    request: Request
    emit: Callable[[Emitted], None]
    time_limit: float
    client: str = ""
    cancel: CancelToken = field(default_factory=CancelToken)
    timed_out: bool = False
    submitted: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Served:
    """A request that left the engine: who sent it, how it ended, what it produced."""

    client: str
    kind: str
    reason: FinishReason
    generated: int
    prompt_tokens: int
    reused_prompt_tokens: int
    timed_out: bool
    prediction: tuple[int, int] | None = None  # with a prediction: its drafted tokens accepted and rejected


@dataclass(frozen=True)
class PairInfo:
    """What ``/v1/models`` and the responses say about the loaded pair."""

    model_id: str
    target: str
    draft: str | None
    has_mtp: bool
    n_ctx: int
    default_drafter: str
    placement: tuple[str, str | None]


def best_drafter(offered: frozenset[str]) -> str:
    """The registry's default for the pair: the composite where a model can draft, lookup alone otherwise."""
    return default_drafter(offered).key


class _JobQueue(queue.Queue[Job | None]):
    """The FIFO of waiting requests, from which a request whose client left can be taken out at once."""

    def withdraw(self, job: Job) -> bool:
        """Take ``job`` out if it still waits; whether it did."""
        with self.mutex:  # Queue's own lock and conditions, as its subclasses use them
            for i, waiting in enumerate(self.queue):
                if waiting is job:  # by identity: jobs compare as dataclasses
                    del self.queue[i]
                    self.not_full.notify()
                    return True
            return False


class RequestQueue:
    """Runs requests one after another on ``runtime``, in arrival order.

    Without ``owner`` this host's own thread runs them and is the only one to
    touch the runtime; with it (the window) each request runs on the owner's
    thread, between the owner's own work. ``listener`` sees every request's
    events, drafts included (the window's Server panel).
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        queue_size: int = 8,
        drafter: str | None = None,
        owner: RuntimeOwner | None = None,
        listener: Listener | None = None,
    ) -> None:
        self.runtime = runtime
        self.owner = owner
        self.listener = listener
        self._has_mtp = runtime.has_mtp
        self._offered = runtime.offered
        self._check_drafter(drafter, status=None)
        self.default_drafter = self._drafter_name(drafter) if drafter else best_drafter(self._offered)
        self._queue = _JobQueue(maxsize=queue_size)
        self._closing = False
        self._lock = threading.Lock()
        self._running: Job | None = None
        self._mean_seconds = 5.0  # a request's usual time, for Retry-After (moving average)
        self.served: deque[Served] = deque(maxlen=256)  # the latest requests, newest last
        self._thread = threading.Thread(target=self._work, name="specchat-serve-engine", daemon=True)
        self._thread.start()
        self.info = PairInfo(
            model_id=runtime.target.path.stem,
            target=runtime.target_name,
            draft=runtime.draft_name,
            has_mtp=self._has_mtp,
            n_ctx=runtime.n_ctx,
            default_drafter=self.default_drafter,
            placement=runtime.placement(),
        )

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._running is not None

    def submit(self, job: Job) -> None:
        """Queue ``job``; a 429 with Retry-After when the queue is full, a 503 once the host is closing."""
        self._check_drafter(job.request.spec.drafter, status=400)
        if self._closing:
            raise shutting_down()
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            wait = max(1, round(self._mean_seconds * (self._queue.qsize() + 1)))
            raise ApiError(
                429,
                f"the server is busy: {self._queue.maxsize} requests are waiting; retry later",
                code="queue_full",
                headers={"Retry-After": str(wait)},
            ) from None

    def withdraw(self, job: Job) -> bool:
        """Give up ``job``'s place in the queue (its client went away); whether it was still waiting.

        A withdrawn job gets no more events: its owner ends the request itself."""
        return self._queue.withdraw(job)

    def stop_taking(self) -> None:
        """Refuse new requests (503), cancel the running one and end the waiting ones; the thread stays."""
        with self._lock:
            self._closing = True
            if self._running is not None:
                self._running.cancel.cancel()
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel.cancel()
                self._tell(job, Finished(FinishReason.CANCELLED, GenerationStats(), SHUTTING_DOWN))

    def close(self) -> None:
        """Cancel what runs and waits, stop the thread (the runtime stays open: its owner closes it)."""
        self.stop_taking()
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _drafter_name(self, kind: str) -> str:
        """The registry name ``kind`` means on this pair ("draft" with a head loaded: the head's drafter)."""
        return resolve(kind, self._offered).key

    def _check_drafter(self, kind: str | None, status: int | None) -> None:
        if kind is None:
            return
        entry = resolve(kind, self._offered)
        if entry.available(self._offered):
            return
        problem = f"the {entry.key} drafter needs a {entry.lacking()}; this server has none loaded"
        if status is None:
            raise SpecchatError(problem)
        raise ApiError(status, problem, param="speculative.drafter", code="unsupported_drafter")

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            with self._lock:
                self._running = job
                if self._closing:  # taken off the queue just as stop_taking looked for the running job
                    job.cancel.cancel()
            started = time.monotonic()
            try:
                if self.owner is None:
                    self._serve(job)
                elif not self.owner(partial(self._serve, job), job.cancel):
                    self._tell(job, Finished(FinishReason.CANCELLED, GenerationStats(), "cancelled while waiting"))
            finally:
                with self._lock:
                    self._running = None
                self._mean_seconds = 0.8 * self._mean_seconds + 0.2 * (time.monotonic() - started)

    def _serve(self, job: Job) -> None:
        """Run ``job`` on the runtime's thread; an unexpected error ends it, never the thread."""
        try:
            self._run(job)
        except Exception as exc:  # noqa: BLE001 - the runtime's thread outlives any one request
            self.runtime.forget_contexts()
            self._tell(job, Finished(FinishReason.ERROR, GenerationStats(), f"{type(exc).__name__}: {exc}"))

    def _run(self, job: Job) -> None:
        prompt = self._checked_prompt(job)
        if prompt is None:
            return
        request = job.request
        kind = self.drafter_of(request)
        stream = self.runtime.stream(
            prompt,
            request.params,
            drafter=kind,
            depth=DepthControl(request.spec.depth),
            cancel=job.cancel,
            progress=_read_in_steps,
            sources=request.sources(),
        )
        predicted = [0, 0]
        self._tell(job, Started(len(prompt.tokens), kind, time.monotonic() - job.submitted))
        timer = self._time_limit(job)
        try:
            for event in stream:
                if isinstance(event, Verified):
                    accepted, rejected = event.drafted_from(PREDICTION_NAME)
                    predicted[0] += accepted
                    predicted[1] += rejected
                if isinstance(event, Finished):
                    self._record(job, event, len(prompt.tokens), (predicted[0], predicted[1]))
                if isinstance(event, (Verified, Finished)):
                    self._tell(job, event)
                elif isinstance(event, Drafted) and self.listener is not None:
                    self.listener(job, event)
        finally:
            timer.cancel()

    def drafter_of(self, request: Request) -> str:
        """The registry name of the drafter ``request`` runs with (its own, or the server's default)."""
        return self._drafter_name(request.spec.drafter) if request.spec.drafter else self.default_drafter

    def _checked_prompt(self, job: Job) -> Prompt | None:
        """The job's prompt; None once the job has been answered instead (cancelled while waiting, a bad prompt)."""
        if job.cancel.cancelled:
            self._tell(job, Finished(FinishReason.CANCELLED, GenerationStats(), "cancelled while waiting"))
            return None
        request = job.request
        param = "messages" if request.kind == "chat" else "prompt"
        try:
            return self._prompt(request)
        except PromptTooLongError as exc:  # the window's guard, in the API's words
            size = f"at least {exc.tokens:,}" if exc.at_least else str(exc.tokens)
            self._tell(
                job,
                ApiError(
                    400,
                    f"the prompt is {size} tokens but the context holds {exc.n_ctx}",
                    param=param,
                    code="context_length_exceeded",
                ),
            )
        except SpecchatError as exc:
            self._tell(job, ApiError(400, str(exc), param=param))
        return None

    def _time_limit(self, job: Job) -> threading.Timer:
        """A started timer that cancels ``job`` once its time is up (the caller cancels the timer at its end)."""

        def time_up() -> None:
            job.timed_out = True
            job.cancel.cancel()

        timer = threading.Timer(job.time_limit, time_up)
        timer.daemon = True
        timer.start()
        return timer

    def _record(self, job: Job, event: Finished, prompt_tokens: int, predicted: tuple[int, int] = (0, 0)) -> None:
        """Remember how ``job`` ended (the latest requests, for the window's Server panel); ``predicted``: its
        prediction's drafted tokens accepted and rejected."""
        s = event.stats
        self.served.append(
            Served(
                job.client,
                job.request.kind,
                event.reason,
                s.generated,
                prompt_tokens,
                s.reused_prompt_tokens,
                job.timed_out,
                None if job.request.prediction is None else predicted,
            )
        )

    def _tell(self, job: Job, event: Emitted) -> None:
        """Hand ``event`` to the request's client and to the listener."""
        job.emit(event)
        if self.listener is not None:
            self.listener(job, event)

    def _prompt(self, request: Request) -> Prompt:
        """The request's prompt (chat: through the model's own template, with its tools), by the runtime's guard."""
        if request.kind == "chat":
            tools = list(request.tools) if request.tools else None
            return self.runtime.prompt(list(request.messages), tools=tools, reply_to_user=False)
        return self.runtime.prompt(request.prompt)


def _read_in_steps(done: int, total: int) -> None:
    """Asks the runtime to read a long prompt in steps, so a cancel (the client gone, the time up) is seen
    between them; nobody watches the count."""
