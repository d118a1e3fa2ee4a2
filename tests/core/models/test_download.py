"""Hub downloads against the loopback hub: progress, cancel/resume, cuts, checksums, errors, disk space."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from specchat.core.cancel import CancelToken
from specchat.core.models.download import DownloadProgress, download_file, download_quant
from specchat.core.models.errors import (
    ChecksumMismatchError,
    DownloadCancelledError,
    HubAccessError,
    HubNetworkError,
    HubNotFoundError,
    NotEnoughDiskSpaceError,
)
from specchat.core.models.hfcache import hf_cache_dir
from specchat.core.models.hub import list_gguf_files, search_gguf

REPO = "acme/Tiny-GGUF"
NAME = "tiny-Q8_0.gguf"
DATA = os.urandom(256 * 1024)
CHUNK = 16 * 1024


@pytest.fixture
def served(hub):
    hub.add(REPO, NAME, DATA)
    return hub


def _partials(root: Path) -> list[Path]:
    return sorted(root.rglob("*.incomplete"))


def test_clean_download_lands_in_the_hub_cache_with_progress(served, app_dirs) -> None:
    events: list[DownloadProgress] = []
    got = download_file(REPO, NAME, endpoint=served.url, on_progress=events.append, chunk_size=CHUNK)
    assert got.path.read_bytes() == DATA
    assert got.sha256 == hashlib.sha256(DATA).hexdigest()
    # the standard cache layout, under HF_HOME as it is at call time
    assert got.path == hf_cache_dir() / "models--acme--Tiny-GGUF" / "snapshots" / got.commit / NAME
    assert str(app_dirs["hf"]) in str(got.path)
    assert got.path.is_symlink() and got.path.resolve().parent.name == "blobs"
    assert (got.path.parents[2] / "refs" / "main").read_text() == got.commit
    dones = [e.done for e in events]
    assert dones == sorted(dones) and dones[-1] == len(DATA)
    assert len(events) >= len(DATA) // CHUNK
    assert all(e.total == len(DATA) for e in events)
    assert all(e.speed >= 0 for e in events) and events[-1].eta == 0
    assert _partials(hf_cache_dir()) == []
    # huggingface_hub's own cache reader finds it
    from huggingface_hub import try_to_load_from_cache

    assert try_to_load_from_cache(REPO, NAME, cache_dir=hf_cache_dir()) == str(got.path)
    # a second call transfers nothing
    before = len(served.gets(NAME))
    again = download_file(REPO, NAME, endpoint=served.url)
    assert again.already_present and again.path == got.path
    assert len(served.gets(NAME)) == before


def test_cancel_keeps_the_partial_and_the_next_attempt_asks_only_for_the_rest(served) -> None:
    token = CancelToken()

    def stop_after_64k(event: DownloadProgress) -> None:
        if event.done >= 64 * 1024:
            token.cancel()

    with pytest.raises(DownloadCancelledError, match="run it again to resume"):
        download_file(REPO, NAME, endpoint=served.url, cancel=token, on_progress=stop_after_64k, chunk_size=CHUNK)
    [partial] = _partials(hf_cache_dir())
    kept = partial.stat().st_size
    assert 64 * 1024 <= kept < 64 * 1024 + CHUNK  # stopped within one piece (blocks arrive as the socket gives them)
    assert partial.read_bytes() == DATA[:kept]

    got = download_file(REPO, NAME, endpoint=served.url, chunk_size=CHUNK)
    last = served.gets(NAME)[-1]
    assert last.range == f"bytes={kept}-" and last.status == 206
    assert last.sent == len(DATA) - kept
    assert got.resumed_from == kept
    assert got.path.read_bytes() == DATA
    assert _partials(hf_cache_dir()) == []


def test_a_cut_connection_is_resumed_from_where_it_broke(served) -> None:
    served.cut_after = [100_000]
    got = download_file(REPO, NAME, endpoint=served.url, chunk_size=CHUNK, retry_wait=0.01)
    first, second = served.gets(NAME)
    assert first.sent == 100_000 and first.range is None
    assert second.range is not None and second.status == 206
    start = int(second.range.split("=")[1].rstrip("-"))
    assert 0 < start <= 100_000
    assert first.sent + second.sent - (100_000 - start) == len(DATA)  # bytes received were not fetched twice
    assert got.path.read_bytes() == DATA


def test_connection_that_keeps_dropping_gives_up_and_keeps_the_bytes(served) -> None:
    served.cut_after = [50_000, 0, 0, 0]
    with pytest.raises(HubNetworkError, match="lost the connection to .*run again to resume"):
        download_file(REPO, NAME, endpoint=served.url, chunk_size=CHUNK, max_retries=2, retry_wait=0.01)
    [partial] = _partials(hf_cache_dir())
    kept = partial.stat().st_size
    assert 0 < kept <= 50_000
    got = download_file(REPO, NAME, endpoint=served.url, chunk_size=CHUNK)
    assert got.path.read_bytes() == DATA
    assert got.resumed_from == kept
    assert served.gets(NAME)[-1].range == f"bytes={kept}-"


def test_server_ignoring_range_restarts_cleanly(served) -> None:
    token = CancelToken()
    with pytest.raises(DownloadCancelledError):
        download_file(
            REPO,
            NAME,
            endpoint=served.url,
            cancel=token,
            chunk_size=CHUNK,
            on_progress=lambda e: token.cancel() if e.done else None,
        )
    served.ignore_range = True
    got = download_file(REPO, NAME, endpoint=served.url, chunk_size=CHUNK)
    assert served.gets(NAME)[-1].status == 200
    assert got.path.read_bytes() == DATA


def test_sha256_mismatch_deletes_the_file_and_says_so(served) -> None:
    served.corrupt.add(NAME)
    with pytest.raises(ChecksumMismatchError, match=f"{REPO}/{NAME} failed its SHA-256 check.*deleted"):
        download_file(REPO, NAME, endpoint=served.url)
    cache = hf_cache_dir()
    assert _partials(cache) == []
    assert not [p for p in cache.rglob("*") if p.is_file() and p.stat().st_size == len(DATA)]
    served.corrupt.clear()
    assert download_file(REPO, NAME, endpoint=served.url).path.read_bytes() == DATA


def test_small_non_lfs_file_is_checked_against_its_git_blob_id(hub) -> None:
    hub.add(REPO, "README.md", b"# tiny\n", lfs=False)
    got = download_file(REPO, "README.md", endpoint=hub.url)
    assert got.path.read_bytes() == b"# tiny\n"
    hub.corrupt.add("README.md")
    with pytest.raises(ChecksumMismatchError, match="git SHA-1"):
        download_file(REPO, "README.md", endpoint=hub.url, local_dir=got.path.parents[5] / "elsewhere")


def test_local_dir_download(served, tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    got = download_file(REPO, NAME, endpoint=served.url, local_dir=folder)
    assert got.path == folder / NAME and got.path.read_bytes() == DATA
    meta = (folder / ".cache" / "huggingface" / "download" / f"{NAME}.metadata").read_text().splitlines()
    assert meta[1] == hashlib.sha256(DATA).hexdigest()
    assert download_file(REPO, NAME, endpoint=served.url, local_dir=folder).already_present


def test_not_found_repo_and_file(served) -> None:
    with pytest.raises(HubNotFoundError, match=f"repository acme/nope not found on {served.url}"):
        download_file("acme/nope", NAME, endpoint=served.url)
    with pytest.raises(HubNotFoundError, match=f"missing.gguf not found in {REPO} on {served.url}"):
        download_file(REPO, "missing.gguf", endpoint=served.url)


def test_gated_repo_says_how_to_authenticate(served) -> None:
    served.add("meta/Gated", NAME, DATA)
    served.gated.add("meta/Gated")
    with pytest.raises(HubAccessError, match=f"meta/Gated on {served.url} is gated.*HF_TOKEN"):
        download_file("meta/Gated", NAME, endpoint=served.url)
    with pytest.raises(HubAccessError, match="meta/Gated"):
        list_gguf_files("meta/Gated", endpoint=served.url)


def test_network_down_names_the_endpoint() -> None:
    with ClosedPort() as url:
        with pytest.raises(HubNetworkError, match=f"cannot reach {url}.*network down"):
            download_file(REPO, NAME, endpoint=url)
        with pytest.raises(HubNetworkError, match=f"cannot reach {url}"):
            list_gguf_files(REPO, endpoint=url)


def test_not_enough_disk_space_is_refused_before_any_transfer(served) -> None:
    with pytest.raises(NotEnoughDiskSpaceError, match=r"needs 262\.1 KB, only 1\.0 KB free"):
        download_file(REPO, NAME, endpoint=served.url, free_space=lambda path: 1000)
    assert served.gets(NAME) == []
    # a resume only needs room for the rest
    token = CancelToken()
    with pytest.raises(DownloadCancelledError):
        download_file(
            REPO,
            NAME,
            endpoint=served.url,
            cancel=token,
            chunk_size=CHUNK,
            on_progress=lambda e: token.cancel() if e.done >= 128 * 1024 else None,
        )
    seen: list[int] = []

    def free_space(path: Path) -> int:
        seen.append(1)
        return len(DATA) - 128 * 1024

    got = download_file(REPO, NAME, endpoint=served.url, free_space=free_space)
    assert seen and got.path.read_bytes() == DATA


def test_endpoint_comes_from_hf_endpoint_at_call_time(served, monkeypatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", served.url)
    assert download_file(REPO, NAME).path.read_bytes() == DATA


def test_search_and_file_listing(hub) -> None:
    hub.add("acme/Qwen-Tiny-GGUF", "qwen-tiny-q8_0.gguf", b"x" * 10)
    hub.add("acme/Qwen-Tiny-GGUF", "qwen-tiny-Q4_K_M.gguf", b"y" * 20)
    hub.add("acme/Qwen-Tiny-GGUF", "README.md", b"z", lfs=False)
    hub.add("other/Llama-GGUF", "l.gguf", b"w")
    hub.downloads["acme/Qwen-Tiny-GGUF"] = 5
    found = search_gguf("qwen", endpoint=hub.url)
    assert [r.repo_id for r in found] == ["acme/Qwen-Tiny-GGUF"] and found[0].downloads == 5
    files = list_gguf_files("acme/Qwen-Tiny-GGUF", endpoint=hub.url)
    assert [(f.filename, f.size, f.quant) for f in files] == [
        ("qwen-tiny-Q4_K_M.gguf", 20, "Q4_K_M"),
        ("qwen-tiny-q8_0.gguf", 10, "Q8_0"),
    ]
    assert files[0].sha256 == hashlib.sha256(b"y" * 20).hexdigest()
    [got] = download_quant("acme/Qwen-Tiny-GGUF", "Q8_0", endpoint=hub.url)
    assert got.filename == "qwen-tiny-q8_0.gguf" and got.path.read_bytes() == b"x" * 10
    with pytest.raises(HubNotFoundError, match="no Q5_K_M GGUF file in acme/Qwen-Tiny-GGUF.*Q4_K_M, Q8_0"):
        download_quant("acme/Qwen-Tiny-GGUF", "Q5_K_M", endpoint=hub.url)


class ClosedPort:
    """A loopback URL where nothing listens."""

    def __enter__(self) -> str:
        import socket

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        return None
