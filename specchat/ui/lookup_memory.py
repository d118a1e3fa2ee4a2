"""The window's lookup memory: loaded, rebuilt and extended on a thread of its own, never the GUI's."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from specchat.core.chat.lookup_memory import LookupMemory, load_beside, memory_beside

log = logging.getLogger(__name__)


class LookupMemoryKeeper(QObject):
    """Keeps the lookup memory beside the conversations in ``store_path``, off the GUI thread.

    Every change (turned on or off, a reply remembered) runs on one background
    thread, in the order asked, and ends with ``ready``, on the GUI thread,
    carrying the texts the engine's lookup should search (None while off).
    Off (the default) reads and writes nothing; turning it off deletes the
    memory's file, never a conversation.
    """

    ready = Signal(object)  # list[str] | None
    _done = Signal(object)  # emitted on the background thread; delivered queued as ``ready``

    def __init__(
        self, store_path: Path | str | None, parent: QObject | None = None, *, memory_path: Path | None = None
    ) -> None:
        super().__init__(parent)
        self.store_path = store_path
        self.memory = LookupMemory(memory_path if memory_path is not None else memory_beside(store_path))
        self.enabled = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specchat-lookup-memory")
        self._done.connect(self.ready)

    def set_enabled(self, enabled: bool) -> None:
        """Turn the memory on (load or rebuild it) or off (forget it and delete its file)."""
        if enabled == self.enabled:
            return
        self.enabled = enabled
        self._submit(self._turn_on if enabled else self._turn_off)

    def remember(self, texts: list[str]) -> None:
        """Add a finished exchange's texts (nothing while off)."""
        if self.enabled:
            self._submit(lambda: self._add(texts))

    def wait(self, timeout: float | None = None) -> None:
        """Block until what was asked so far is done (tests, and closing)."""
        self._executor.submit(lambda: None).result(timeout)

    def close(self) -> None:
        """Finish what was asked, then stop the thread."""
        self._executor.shutdown(wait=True)

    def _submit(self, job: Callable[[], list[str] | None]) -> Future[None]:
        def run() -> None:
            try:
                texts = job()
            except (OSError, ValueError) as exc:  # an unwritable data folder: the memory works unsaved
                log.warning("lookup memory: %s", exc)
                texts = self.memory.texts or None
            self._done.emit(texts)

        return self._executor.submit(run)

    def _turn_on(self) -> list[str]:
        self.memory.enabled = True
        return load_beside(self.memory, self.store_path)

    def _turn_off(self) -> None:
        self.memory.disable(forget=True)
        return None

    def _add(self, texts: list[str]) -> list[str] | None:
        if not self.memory.enabled:
            return None
        for text in texts:
            self.memory.add(text)
        return self.memory.texts
