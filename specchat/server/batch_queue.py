"""The server with ``--parallel N``: up to N requests decode together, joining and leaving at round boundaries.

:class:`BatchedRequestQueue` takes the place of
:class:`~specchat.server.request_queue.RequestQueue` (the same queue, limits,
429 and events per request) but drives the runtime's batched engine
(:class:`~specchat.core.runtime.batched.BatchedRuntime`): each round advances
every running request by one verify batch of the target; between rounds the
requests waiting are admitted while there is room (continuous batching), and a
request whose client went away or whose time is up ends at the next round
without touching the others.

Requests that draft with n-gram lookup, with the pair's draft model (shared by
the batch: one draft context, a sequence each) or not at all join the batch.
One that asks for a drafter that needs MTP heads or a head, for the automatic
drafter, or that sends a ``prediction``, runs alone on the runtime as with
``--parallel 1``: the requests running finish first, nothing else is admitted
meanwhile, and the batch resumes after it.

In the window (``owner``) the batch runs on the window's runtime thread: each
request that finds the batch idle asks that thread for a turn, and the turn
drives the batch while anything decodes in it. The window's own reply is a
:class:`Guest` in the batch, one sequence kept for it beside the served
requests: sent while the batch runs, it joins at the next round
(:meth:`BatchedRequestQueue.join`); sent while it is idle, its own turn drives
the batch (:meth:`BatchedRequestQueue.host`), and requests that come meanwhile
join it. It ends alone when stopped, and keeps the turn going until it ends.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal

from specchat.core.engine.depth import DepthControl
from specchat.core.types import (
    Drafted,
    DrafterKind,
    Event,
    Finished,
    FinishReason,
    GenerationStats,
    SpecchatError,
    Verified,
)
from specchat.server.request_queue import Job, Listener, RequestQueue, RuntimeOwner, Started

if TYPE_CHECKING:
    from specchat.core.runtime.batched import BatchedRuntime


@dataclass(eq=False)
class Guest:
    """A reply of the runtime's owner (the window's own) decoding in the batch beside the served requests.

    Both callables run on the runtime's thread: ``start`` reads its prompt into the batch and returns its key,
    or None once it has ended before joining (it has told its owner itself); ``emit`` takes its events of one
    round, in order, the last of them its Finished."""

    start: Callable[[BatchedRuntime], int | None]
    emit: Callable[[list[Event]], None]


@dataclass
class _Running:
    job: Job
    timer: threading.Timer
    prompt_tokens: int
    started: float


class BatchedRequestQueue(RequestQueue):
    """Runs up to ``batch.n_seq`` requests at once on ``batch`` (built on the runtime by its owner, which closes
    both), the rest waiting in arrival order. Without ``drafter`` a request drafts with n-gram lookup (the best
    drafter that joins the batch). With ``owner`` (the window) the batch runs on the owner's thread, and one of
    its sequences is kept for the owner's own reply (:meth:`join`)."""

    def __init__(
        self,
        batch: BatchedRuntime,
        *,
        queue_size: int = 8,
        drafter: str | None = None,
        owner: RuntimeOwner | None = None,
        listener: Listener | None = None,
    ) -> None:
        # Everything the worker thread reads is set before RequestQueue starts it.
        self.batch = batch
        # With an owner, one sequence is kept for the owner's own reply (a Guest).
        self.parallel = batch.n_seq - (owner is not None)
        if self.parallel < 1:
            raise SpecchatError("a batch shared with the window needs room for a served request beside its reply")
        self._jobs: dict[int, _Running] = {}
        self._alone: Job | None = None  # a request that cannot join the batch, waiting for it to empty
        self._guests: dict[int, Guest] = {}  # the owner's replies decoding in the batch, by key
        self._joining: list[Guest] = []  # the owner's replies that join at the next round
        self._driving = False  # a turn drives the batch now, so a guest can join it
        self._ended = False  # the queue closed: the turn ends once the batch is empty
        self._held: Job | None = None  # with an owner: the request whose turn is asked for
        self._held_taken = False  # it was let into the batch (by its own turn, or by the owner's reply's)
        self.ran_alone = 0  # requests served alone beside the batch
        super().__init__(
            batch.runtime,
            queue_size=queue_size,
            drafter=drafter or DrafterKind.NGRAM.value,
            owner=owner,
            listener=listener,
        )

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._jobs) or self._running is not None

    @property
    def running(self) -> int:
        """Requests decoding now."""
        with self._lock:
            return len(self._jobs) + (self._running is not None)

    def stop_taking(self) -> None:
        with self._lock:
            if self._held is not None:
                self._held.cancel.cancel()
            for running in self._jobs.values():
                running.job.cancel.cancel()
            if self._alone is not None:
                self._alone.cancel.cancel()
        super().stop_taking()

    def join(self, guest: Guest) -> bool:
        """Let the owner's ``guest`` join the batch at the next round (called from any thread); False when no turn
        drives the batch now (it is idle, ending, or a request that cannot batch runs alone): the reply then waits
        for the runtime as before."""
        with self._lock:
            if not self._driving or self._ended or self._closing or self._running is not None:
                return False
            self._joining.append(guest)
            return True

    def host(self, guest: Guest) -> None:
        """Run the owner's ``guest`` in the batch now, on the runtime's thread (the owner's own turn), with the
        requests that come meanwhile, until the batch is empty."""
        with self._lock:
            self._joining.append(guest)
        self._drive(None)

    @property
    def hosting(self) -> bool:
        """Whether an owner's reply decodes in the batch or is about to join it."""
        with self._lock:
            return bool(self._guests or self._joining)

    def close(self) -> None:
        """As :meth:`RequestQueue.close`; with the owner's reply in the batch, without waiting for it to end (the
        turn ends with it)."""
        if self.owner is None:
            super().close()
            return
        self.stop_taking()  # no guest joins from here on
        self._queue.put(None)
        if not self.hosting:
            self._thread.join(timeout=30)

    def _work(self) -> None:
        if self.owner is None:
            self._drive(None)
            return
        while not self._ended:
            job = self._queue.get()  # idle: wait for the next request
            if job is None:
                return
            with self._lock:
                self._held, self._held_taken = job, False
                if self._closing:
                    job.cancel.cancel()
            try:
                ran = self.owner(partial(self._drive, job), job.cancel)
                with self._lock:  # not run: claim it, unless the owner's reply's turn let it in already
                    taken, self._held_taken = self._held_taken, True
                if not ran and not taken:
                    self._tell(job, Finished(FinishReason.CANCELLED, GenerationStats(), "cancelled while waiting"))
            finally:
                with self._lock:
                    self._held = None

    def _drive(self, first: Job | None) -> None:
        """The batch, round after round, on the runtime's thread. Without an owner until the queue closes; with
        one, a turn of the owner's thread while anything decodes in the batch."""
        with self._lock:
            self._driving = True
            held = first is not None and first is self._held
            taken = held and self._held_taken
            if held:
                self._held_taken = True
        if first is not None and not taken:  # else the owner's reply's turn let it in already
            self._take(first)
        while True:
            self._admit_guests()
            if not self._jobs and not self._guests:
                if self._alone is not None:
                    job, self._alone = self._alone, None
                    with self._lock:
                        if self._joining:  # the owner's reply joined first: the request runs after it
                            self._alone = job
                            continue
                        self._running = job
                    self._run_alone(job)
                    continue
                if not self._ended:
                    waiting = self._next(block=self.owner is None)
                    if waiting is not False:
                        if waiting is None:
                            self._closed_queue()
                        else:
                            self._take(waiting)
                        continue
                with self._lock:
                    if self._joining:
                        continue
                    self._driving = False
                    return
            while not self._ended and self._alone is None and len(self._jobs) < self.parallel and self.batch.room > 0:
                waiting = self._next(block=False)  # a round boundary: let waiting requests in
                if waiting is False:
                    break
                if waiting is None:
                    self._closed_queue()
                    break
                self._take(waiting)
            self._round()

    def _closed_queue(self) -> None:
        """The queue's closing mark was read here: the turn ends once the batch is empty. With an owner, the mark
        goes back for the thread that waits for requests, which then ends too."""
        self._ended = True
        if self.owner is not None:
            self._queue.put(None)

    def _next(self, *, block: bool) -> Job | None | Literal[False]:
        """The next waiting request; None: the queue closed; False: none waits (only when not ``block``). A request
        waiting for a turn of its own while the owner's reply drives the batch comes first."""
        with self._lock:
            if self._held is not None and not self._held_taken:
                self._held_taken = True
                return self._held
        if block:
            return self._queue.get()
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return False

    def _admit_guests(self) -> None:
        with self._lock:
            joining, self._joining = self._joining, []
        for guest in joining:
            try:
                key = guest.start(self.batch)
            except Exception as exc:  # noqa: BLE001 - the owner's reply ends, never the turn
                guest.emit([Finished(FinishReason.ERROR, GenerationStats(), f"{type(exc).__name__}: {exc}")])
                continue
            if key is not None:
                with self._lock:
                    self._guests[key] = guest

    def _take(self, job: Job) -> None:
        """Admit ``job`` to the batch, or set it aside to run alone once the batch is empty."""
        kind = self.batch.drafts_with(self.drafter_of(job.request))
        if not self.batch.batchable(kind) or job.request.sources():  # the batch drafts from no outside text
            self._alone = job
            return
        with self._lock:
            if self._closing:
                job.cancel.cancel()
        try:
            self._admit(job, kind)
        except Exception as exc:  # noqa: BLE001 - the engine's thread outlives any one request
            self._tell(job, Finished(FinishReason.ERROR, GenerationStats(), f"{type(exc).__name__}: {exc}"))

    def _admit(self, job: Job, kind: str) -> None:
        prompt = self._checked_prompt(job)
        if prompt is None:
            return
        request = job.request
        key, early = self.batch.admit(
            prompt, request.params, drafter=kind, depth=DepthControl(request.spec.depth), cancel=job.cancel
        )
        self._tell(job, Started(len(prompt.tokens), kind, time.monotonic() - job.submitted))
        if early is not None:
            self._record(job, early, len(prompt.tokens))
            self._tell(job, early)
            return
        with self._lock:
            self._jobs[key] = _Running(job, self._time_limit(job), len(prompt.tokens), time.monotonic())

    def _round(self) -> None:
        """One round of the batch; each event to its request."""
        try:
            events = self.batch.step()
        except Exception as exc:  # noqa: BLE001 - a bug ends the running requests, never the thread
            self.batch.reset()
            for key in list(self._jobs):
                self._end(key, Finished(FinishReason.ERROR, GenerationStats(), f"{type(exc).__name__}: {exc}"))
            with self._lock:
                guests, self._guests = list(self._guests.values()), {}
            for guest in guests:
                guest.emit([Finished(FinishReason.ERROR, GenerationStats(), f"{type(exc).__name__}: {exc}")])
            return
        hosted: dict[int, list[Event]] = {}
        for key, event in events:
            if key in self._guests:
                hosted.setdefault(key, []).append(event)
                continue
            running = self._jobs[key]
            if isinstance(event, Finished):
                self._end(key, event)
            elif isinstance(event, Verified):
                self._tell(running.job, event)
            elif isinstance(event, Drafted) and self.listener is not None:
                self.listener(running.job, event)
        for key, guest_events in hosted.items():
            guest = self._guests[key]
            if isinstance(guest_events[-1], Finished):
                with self._lock:
                    del self._guests[key]
            guest.emit(guest_events)

    def _end(self, key: int, event: Finished) -> None:
        with self._lock:
            running = self._jobs.pop(key)
        running.timer.cancel()
        self._record(running.job, event, running.prompt_tokens)
        self._tell(running.job, event)
        # Retry-After divides a request's time among the requests decoding beside it.
        seconds = (time.monotonic() - running.started) / self.parallel
        self._mean_seconds = 0.8 * self._mean_seconds + 0.2 * seconds

    def _run_alone(self, job: Job) -> None:
        """A request whose drafter cannot join the batch: on the runtime by itself, as ``--parallel 1`` runs it."""
        with self._lock:
            self._running = job
            if self._closing:
                job.cancel.cancel()
        started = time.monotonic()
        self.ran_alone += 1
        try:
            self._serve(job)
        finally:
            with self._lock:
                self._running = None
            self._mean_seconds = 0.8 * self._mean_seconds + 0.2 * (time.monotonic() - started)
