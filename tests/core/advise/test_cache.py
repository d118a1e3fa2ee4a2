"""Cached results per (target, drafter, draft, machine, build), invalidated when a file changes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from specchat.core.advise import cache

MODELS = Path(__file__).resolve().parents[2] / "models"


def result(target: Path, draft: Path | None, drafter: str = "draft") -> cache.CachedResult:
    return cache.CachedResult(str(target), drafter, str(draft or ""), 5, 1.4, 1.3, 1.38, 0.8, 1.0)


def test_a_stored_result_is_found_until_a_file_changes(tmp_path: Path) -> None:
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    shutil.copy(MODELS / "llama.gguf", target)
    shutil.copy(MODELS / "llama-q8.gguf", draft)
    cache.store([result(target, draft), result(target, None, "ngram")])
    assert cache.cache_path().parent == Path(os.environ["SPECCHAT_DATA_DIR"])
    found = cache.lookup(target, "draft", draft)
    assert found == result(target, draft)
    assert found is not None and found.label() == "measured here: 1.38x at depth 5"
    assert cache.lookup(target, "ngram") == result(target, None, "ngram")
    assert cache.lookup(target, "mtp") is None  # another drafter on the same target

    st = draft.stat()
    os.utime(draft, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: the mtime moved
    assert cache.lookup(target, "draft", draft) is None
    assert cache.lookup(target, "ngram") is not None  # the target did not change

    with target.open("r+b") as f:  # edited in place, size and mtime put back
        st = target.stat()
        f.seek(st.st_size - 1)
        last = f.read(1)
        f.seek(st.st_size - 1)
        f.write(bytes([last[0] ^ 0xFF]))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    cache._identity.cache_clear()  # a new process: identities are remembered per file version in-process
    assert cache.lookup(target, "ngram") is None


def test_a_missing_file_or_a_corrupt_cache_has_no_result(tmp_path: Path) -> None:
    assert cache.lookup(tmp_path / "gone.gguf", "ngram") is None
    cache.cache_path().write_text("{not json")
    assert cache.lookup(MODELS / "llama.gguf", "ngram") is None
    label = cache.CachedResult("t", "ngram", "", 3, 1.2, 1.1, None, 0.5, 0.0).label()
    assert label == "predicted here: 1.20x at depth 3"
