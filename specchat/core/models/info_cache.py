"""GGUF headers with their vocabularies, read once per file version.

Reading a vocabulary with the ``gguf`` reader takes seconds for a large one,
and the model picker judges the same target against draft after draft; so each
file's :class:`GgufInfo` (read ``with_vocab=True``) is kept under its path,
size and modification time, and read again only when one of those changes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from specchat.core.models.ggufmeta import GgufInfo, read_gguf_info

Reader = Callable[[Path], GgufInfo]
FileVersion = tuple[str, int, int]  # path, size, mtime in ns


def read_with_vocab(path: Path) -> GgufInfo:
    """The header and the vocabulary (the cache's default reader)."""
    return read_gguf_info(path, with_vocab=True)


class InfoCache:
    """The last ``size`` files' infos, by (path, size, mtime); safe to share between threads."""

    def __init__(self, read: Reader = read_with_vocab, size: int = 4) -> None:
        self._read, self._size = read, size
        self._lock = threading.Lock()
        self._infos: OrderedDict[FileVersion, GgufInfo] = OrderedDict()

    def get(self, path: Path | str) -> GgufInfo:
        """The file's info, read unless this version of it was read before; the reader's errors as they come
        (GgufReadError, one line) and are not kept."""
        path = Path(path)
        try:
            stat = path.stat()
        except OSError:
            return self._read(path)  # it says what is wrong with the path, in one line
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        with self._lock:
            if key in self._infos:
                self._infos.move_to_end(key)
                return self._infos[key]
        info = self._read(path)  # outside the lock: another file need not wait for this one
        with self._lock:
            self._infos[key] = info
            self._infos.move_to_end(key)
            while len(self._infos) > self._size:
                self._infos.popitem(last=False)
        return info

    def clear(self) -> None:
        with self._lock:
            self._infos.clear()


INFOS = InfoCache()
"""The process's cache (vocabularies run to megabytes each: it keeps a few files)."""
