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
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specchat.core.engine.depth import DepthControl
from specchat.core.types import Drafted, DrafterKind, Finished, FinishReason, GenerationStats, Verified
from specchat.server.request_queue import Job, Listener, RequestQueue, Started

if TYPE_CHECKING:
    from specchat.core.runtime.batched import BatchedRuntime


@dataclass
class _Running:
    job: Job
    timer: threading.Timer
    prompt_tokens: int
    started: float


class BatchedRequestQueue(RequestQueue):
    """Runs up to ``batch.n_seq`` requests at once on ``batch`` (built on the runtime by its owner, which closes
    both), the rest waiting in arrival order. Without ``drafter`` a request drafts with n-gram lookup (the best
    drafter that joins the batch)."""

    def __init__(
        self,
        batch: BatchedRuntime,
        *,
        queue_size: int = 8,
        drafter: str | None = None,
        listener: Listener | None = None,
    ) -> None:
        # Everything the worker thread reads is set before RequestQueue starts it.
        self.batch = batch
        self.parallel = batch.n_seq
        self._jobs: dict[int, _Running] = {}
        self._alone: Job | None = None  # a request that cannot join the batch, waiting for it to empty
        self.ran_alone = 0  # requests served alone beside the batch
        super().__init__(
            batch.runtime, queue_size=queue_size, drafter=drafter or DrafterKind.NGRAM.value, listener=listener
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
            for running in self._jobs.values():
                running.job.cancel.cancel()
            if self._alone is not None:
                self._alone.cancel.cancel()
        super().stop_taking()

    def _work(self) -> None:
        closing = False
        while True:
            if not self._jobs:
                if self._alone is not None:
                    job, self._alone = self._alone, None
                    self._run_alone(job)
                    continue
                if closing:
                    return
                waiting = self._queue.get()  # idle: wait for the next request
                if waiting is None:
                    return
                self._take(waiting)
                continue
            while self._alone is None and self.batch.room > 0:  # a round boundary: let waiting requests in
                try:
                    waiting = self._queue.get_nowait()
                except queue.Empty:
                    break
                if waiting is None:
                    closing = True
                    break
                self._take(waiting)
            self._round()

    def _take(self, job: Job) -> None:
        """Admit ``job`` to the batch, or set it aside to run alone once the batch is empty."""
        kind = self.drafter_of(job.request)
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
            return
        for key, event in events:
            running = self._jobs[key]
            if isinstance(event, Finished):
                self._end(key, event)
            elif isinstance(event, Verified):
                self._tell(running.job, event)
            elif isinstance(event, Drafted) and self.listener is not None:
                self.listener(running.job, event)

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
