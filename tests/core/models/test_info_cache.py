"""GGUF infos with vocabularies, read once per file version, and the verdicts that use them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specchat.core.models.errors import GgufReadError
from specchat.core.models.ggufmeta import GgufInfo
from specchat.core.models.info_cache import InfoCache, read_with_vocab
from specchat.core.models.pairs import compatibility_text
from support.gguf_files import GgufMaker


class CountingReader:
    """The real reader, counting the files it reads."""

    def __init__(self) -> None:
        self.read: list[str] = []

    def __call__(self, path: Path) -> GgufInfo:
        self.read.append(path.name)
        return read_with_vocab(path)


def touch_later(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_an_unchanged_file_is_read_once_and_a_changed_one_again(make_gguf: GgufMaker) -> None:
    path = make_gguf("t.gguf")
    reader = CountingReader()
    infos = InfoCache(reader)
    first = infos.get(path)
    assert first.vocab is not None and len(first.vocab.tokens) == len(make_gguf.base_vocab)
    assert infos.get(path) is first and reader.read == ["t.gguf"]
    touch_later(path)
    assert infos.get(path) is not first and reader.read == ["t.gguf", "t.gguf"]


def test_the_oldest_file_is_forgotten_beyond_the_size(make_gguf: GgufMaker) -> None:
    a, b, c = (make_gguf(f"{name}.gguf") for name in "abc")
    reader = CountingReader()
    infos = InfoCache(reader, size=2)
    for path in (a, b, c, b, a):
        infos.get(path)
    assert reader.read == ["a.gguf", "b.gguf", "c.gguf", "a.gguf"]  # b was still kept; a had been dropped


def test_a_bad_file_raises_each_time_and_is_not_kept(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF")
    reader = CountingReader()
    infos = InfoCache(reader)
    for _ in range(2):
        with pytest.raises(GgufReadError) as caught:
            infos.get(bad)
        assert "\n" not in str(caught.value)
    assert reader.read == ["bad.gguf", "bad.gguf"]


def test_the_same_pair_judged_again_reads_no_vocabulary(make_gguf: GgufMaker) -> None:
    target = make_gguf("target.gguf", tensor_elements=8192)
    draft = make_gguf("draft.gguf")
    other = make_gguf("other.gguf", tokens=[*make_gguf.base_vocab[:-1], "changed"])
    reader = CountingReader()
    infos = InfoCache(reader)
    verdict = compatibility_text(str(target), str(draft), infos)
    assert verdict.startswith("✓ compatible") and sorted(reader.read) == ["draft.gguf", "target.gguf"]
    assert compatibility_text(str(target), str(draft), infos) == verdict
    assert len(reader.read) == 2  # nothing read again
    assert compatibility_text(str(target), str(other), infos).startswith("✗ incompatible")
    assert reader.read[2:] == ["other.gguf"]  # a new draft against the same target: the target is not re-read
    touch_later(draft)
    assert compatibility_text(str(target), str(draft), infos) == verdict
    assert reader.read[3:] == ["draft.gguf"]  # a changed file is read again
