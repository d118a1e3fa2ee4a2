"""The transfer itself: ranged GETs appended to a partial file that survives, with progress and cancel.

Every wait checks the cancel token at least every :data:`POLL` seconds,
whatever the server does: each body is read on a daemon thread (a server
trickling one byte a second, or never answering, cannot pin the caller), the
body is taken as it arrives, and waiting for another process's file lock is done
in short steps.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat.core.cancel import CancelToken
from specchat.core.models.download_disk import format_bytes
from specchat.core.models.errors import DownloadCancelledError, HubNetworkError, HubProtocolError
from specchat.core.models.hub import hub_errors

POLL = 0.1  # seconds between cancel checks while waiting on the network or a lock


@dataclass(frozen=True)
class DownloadProgress:
    """One progress report: bytes on disk so far, the total, and this attempt's rate."""

    filename: str
    done: int
    total: int | None
    speed: float  # bytes per second since this attempt started
    eta: float | None  # seconds left at that speed, None when unknown
    resumed_from: int  # bytes that were already on disk when this attempt began


ProgressCallback = Callable[[DownloadProgress], None]


def _hash_prefix(path: Path, cancel: CancelToken | None) -> Any:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            if cancel is not None and cancel.cancelled:
                raise DownloadCancelledError(f"download of {path.name} cancelled while checking the partial file")
            h.update(block)
    return h


@contextmanager
def hold_lock(path: Path, cancel: CancelToken | None, what: str) -> Iterator[None]:
    """huggingface_hub's file lock, waited for in short steps so a cancel is seen."""
    from filelock import Timeout
    from huggingface_hub.utils import WeakFileLock

    with ExitStack() as stack:
        while True:
            try:
                stack.enter_context(WeakFileLock(path, timeout=POLL * 5))
                break
            except Timeout:
                if cancel is not None and cancel.cancelled:
                    raise DownloadCancelledError(f"{what} cancelled while another download of it was running") from None
        yield


class _Body:
    """One GET whose response is read on a daemon thread; the caller waits at most :data:`POLL` at a time.

    When the caller stops (cancel, error), the thread is abandoned: it ends at
    the server's next bytes or at the HTTP read timeout, and never writes.
    """

    def __init__(self, url: str, headers: dict[str, str], timeout: float) -> None:
        self._items: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=64)
        self._stop = threading.Event()
        self._args = (url, headers, timeout)
        threading.Thread(target=self._run, name="hub-body", daemon=True).start()

    def _run(self) -> None:
        from huggingface_hub.utils import get_session

        url, headers, timeout = self._args
        try:
            with get_session().stream("GET", url, headers=headers, follow_redirects=True, timeout=timeout) as response:
                if response.status_code >= 400:
                    response.read()
                self._put("head", response)
                if response.status_code >= 400:
                    return
                for block in response.iter_bytes():  # as the socket delivers it, at most 64 KiB
                    if self._stop.is_set():
                        return
                    self._put("data", block)
            self._put("end", None)
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread by next()
            self._put("error", exc)

    def _put(self, kind: str, value: Any) -> None:
        while not self._stop.is_set():
            try:
                self._items.put((kind, value), timeout=POLL)
                return
            except queue.Full:
                continue

    def next(self, cancel: CancelToken | None, cancelled: Callable[[], Exception], stall: float) -> tuple[str, Any]:
        """The next ("head", response) / ("data", bytes) / ("end", None); raises the reader's error."""
        waited = 0.0
        while True:
            if cancel is not None and cancel.cancelled:
                raise cancelled()
            try:
                kind, value = self._items.get(timeout=POLL)
            except queue.Empty:
                waited += POLL
                if waited > stall:
                    import httpx2

                    raise httpx2.ReadTimeout(f"no answer for {stall:.0f} s") from None
                continue
            if kind == "error":
                raise value
            return kind, value

    def close(self) -> None:
        self._stop.set()


def _pieces(block: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(block), size):
        yield block[i : i + size]


def transfer(
    url: str,
    partial: Path,
    *,
    size: int | None,
    headers: dict[str, str],
    filename: str,
    repo_id: str,
    endpoint: str,
    cancel: CancelToken | None,
    on_progress: ProgressCallback | None,
    max_retries: int,
    retry_wait: float,
    chunk_size: int,
) -> tuple[str, int]:
    """Append the missing bytes to ``partial`` with ranged GETs; return (sha256, bytes there before)."""
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.utils import hf_raise_for_status

    partial.parent.mkdir(parents=True, exist_ok=True)
    offset = partial.stat().st_size if partial.exists() else 0
    if size is not None and offset > size:
        partial.unlink()
        offset = 0
    hasher = _hash_prefix(partial, cancel) if offset else hashlib.sha256()
    resumed_from = offset
    started, start_offset = time.monotonic(), offset
    retries = max_retries
    stall = float(constants.HF_HUB_DOWNLOAD_TIMEOUT) + 5.0  # past httpx's own read timeout

    def report() -> None:
        if on_progress is None:
            return
        elapsed = time.monotonic() - started
        speed = (offset - start_offset) / elapsed if elapsed > 0 else 0.0
        eta = (size - offset) / speed if size is not None and speed > 0 else None
        on_progress(DownloadProgress(filename, offset, size, speed, eta, resumed_from))

    def cancelled() -> DownloadCancelledError:
        return DownloadCancelledError(
            f"download of {filename} cancelled at {format_bytes(offset)}"
            + (f" of {format_bytes(size)}" if size else "")
            + "; run it again to resume"
        )

    report()
    while size is None or offset < size:
        if cancel is not None and cancel.cancelled:
            raise cancelled()
        request_headers = dict(headers)
        if offset:
            request_headers["Range"] = f"bytes={offset}-"
        body = _Body(url, request_headers, constants.HF_HUB_DOWNLOAD_TIMEOUT)
        try:
            _, response = body.next(cancel, cancelled, stall)
            if response.status_code >= 400:
                with hub_errors(endpoint, repo_id, filename):
                    hf_raise_for_status(response)
            with partial.open("ab") as out:
                if offset and response.status_code == 200:  # server ignored Range: start again
                    out.truncate(0)
                    offset = start_offset = 0
                    hasher = hashlib.sha256()
                elif offset and not response.headers.get("Content-Range", "").startswith(f"bytes {offset}-"):
                    raise HubNetworkError(f"{endpoint} answered a resume request for {filename} with the wrong range")
                while (item := body.next(cancel, cancelled, stall))[0] == "data":
                    for piece in _pieces(item[1], chunk_size):
                        if size is not None and offset + len(piece) > size:
                            raise HubProtocolError(
                                f"{endpoint} sent more than the {format_bytes(size)} it announced for {filename}"
                            )
                        out.write(piece)
                        out.flush()  # what was received is on disk, for a resume after a kill
                        hasher.update(piece)
                        offset += len(piece)
                        retries = max_retries  # progress was made: the retry budget starts over
                        report()
                        if cancel is not None and cancel.cancelled:
                            raise cancelled()
            if size is None:
                break
            if offset < size:
                raise httpx2.RemoteProtocolError("stream ended early")
        except httpx2.TransportError as exc:
            if retries <= 0:
                raise HubNetworkError(
                    f"lost the connection to {endpoint} after {format_bytes(offset)}"
                    + (f" of {format_bytes(size)}" if size else "")
                    + f" of {filename} ({type(exc).__name__}); run again to resume"
                ) from None
            retries -= 1
            deadline = time.monotonic() + retry_wait
            while time.monotonic() < deadline:
                if cancel is not None and cancel.cancelled:
                    raise cancelled() from None
                time.sleep(min(POLL / 2, retry_wait))
        finally:
            body.close()
    return hasher.hexdigest(), resumed_from
