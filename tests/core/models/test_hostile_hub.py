"""A hostile hub and hostile arguments: one-line errors, exit 2, and nothing outside the cache touched.

Every case in CASES runs ``python -m specchat models ...`` as a real subprocess
against the loopback hub, with HOME and TMPDIR inside the test's folder, and
compares that folder's tree (everything but the hub cache) before and after.
A victim file sits where the traversal attempts point.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from specchat.core.cancel import CancelToken
from specchat.core.models.download import DownloadProgress, download_file
from specchat.core.models.errors import DownloadCancelledError, DownloadStorageError, UnsafePathError
from specchat.core.models.hfcache import hf_cache_dir, is_unverified
from support.hubserver import COMMIT, FakeHub

REPO = "acme/Tiny-GGUF"
NAME = "tiny-Q8_0.gguf"
DATA = bytes(range(256)) * 256  # 64 KiB
UP = "../" * 7  # from snapshots/<commit>/ well past the test folder's root
VICTIM_BYTES = b"the user's own file\n"


@dataclass(frozen=True)
class Ctx:
    hub: FakeHub
    tmp: Path
    victim: Path  # a folder outside the cache holding files that must survive

    @property
    def cache(self) -> Path:
        return hf_cache_dir()


@dataclass(frozen=True)
class Case:
    id: str
    category: str  # paths | hub answers | integrity
    args: tuple[str, ...]  # after `specchat models`; {url}, {victim}, {tmp} are filled in
    setup: Callable[[Ctx], None]
    expect: str  # regex the one error line (or, with exit 0, stderr) must match
    exit: int = 2


def _serve(ctx: Ctx) -> None:
    ctx.hub.add(REPO, NAME, DATA)


def _listing(name: str) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        ctx.hub.add(REPO, name.format(victim=ctx.victim), DATA)

    return setup


def _with(**knobs: object) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        _serve(ctx)
        for key, value in knobs.items():
            setattr(ctx.hub, key, value)

    return setup


def _raw(content_type: str, body: bytes) -> Callable[[Ctx], None]:
    return _with(raw_api=(content_type, body))


def _pair_listing(ctx: Ctx) -> None:
    from specchat.core.models.catalog import get_pair

    target = get_pair("qwen3-8b").target
    ctx.hub.add(target.repo, f"{UP}victim/x-{target.quant}.gguf", DATA)


def _link_to_victim(ctx: Ctx) -> None:
    _serve(ctx)
    final = ctx.cache / "models--acme--Tiny-GGUF" / "snapshots" / COMMIT / NAME
    final.parent.mkdir(parents=True)
    final.symlink_to(ctx.victim / "x.gguf")


def _user_file_in_local_dir(ctx: Ctx) -> None:
    _serve(ctx)
    (ctx.victim / NAME).write_bytes(VICTIM_BYTES)


DL = ("download", REPO)
QUANT = ("download", REPO, "--quant", "Q8_0", "--endpoint", "{url}")
BY_NAME = ("download", REPO, NAME, "--endpoint", "{url}")
NOT_HUB = r"is not a hub answer \({}\); is it a Hugging Face hub\?"

CASES = [
    # a server or a user choosing where files go
    Case(
        "listing-dotdot",
        "paths",
        QUANT,
        _listing(UP + "victim/x-Q8_0.gguf"),
        r"refusing file name listed by http://127\.0\.0\.1:\d+ '(\.\./)+victim/x-Q8_0\.gguf': .*'\.\.' segment",
    ),
    Case("listing-absolute", "paths", QUANT, _listing("{victim}/x-Q8_0.gguf"), r"refusing file name .*absolute path"),
    Case("listing-backslash", "paths", QUANT, _listing("a\\..\\..\\b-Q8_0.gguf"), r"refusing file name .*backslash"),
    Case(
        "listing-dotdot-files",
        "paths",
        ("files", REPO, "--endpoint", "{url}"),
        _listing(UP + "victim/x-Q8_0.gguf"),
        r"refusing file name listed by .*'\.\.' segment",
    ),
    Case(
        "listing-dotdot-pair",
        "paths",
        ("pair", "qwen3-8b", "--endpoint", "{url}"),
        _pair_listing,
        r"refusing file name listed by .*'\.\.' segment",
    ),
    Case(
        "listing-not-text",
        "paths",
        QUANT,
        _raw("application/json", json.dumps({"id": REPO, "sha": COMMIT, "siblings": [{"rfilename": 5}]}).encode()),
        r"refusing file name listed by .* 5: it is empty or not text",
    ),
    Case(
        "arg-filename-dotdot",
        "paths",
        (*DL, UP + "victim/x.gguf", "--endpoint", "{url}"),
        _serve,
        r"refusing file name '(\.\./)+victim/x\.gguf'",
    ),
    Case(
        "arg-filename-absolute",
        "paths",
        (*DL, "{victim}/x.gguf", "--endpoint", "{url}"),
        _serve,
        r"refusing file name '/.*/victim/x\.gguf': it is an absolute path",
    ),
    Case(
        "arg-filename-backslash",
        "paths",
        (*DL, "..\\..\\x.gguf", "--endpoint", "{url}"),
        _serve,
        r"refusing file name .*backslash",
    ),
    Case(
        "arg-revision-dotdot",
        "paths",
        (*BY_NAME, "--revision", UP + "victim"),
        _serve,
        r"refusing revision '(\.\./)+victim'",
    ),
    Case(
        "arg-repo-dotdot",
        "paths",
        ("download", "../../victim", NAME, "--endpoint", "{url}"),
        _serve,
        r"refusing repository id '\.\./\.\./victim'",
    ),
    Case(
        "arg-local-dir-dotdot",
        "paths",
        (*DL, "../victim/x.gguf", "--local-dir", "{tmp}/dl", "--endpoint", "{url}"),
        _serve,
        r"refusing file name '\.\./victim/x\.gguf'",
    ),
    Case(
        "local-dir-user-file",
        "paths",
        (*BY_NAME, "--local-dir", "{victim}"),
        _user_file_in_local_dir,
        r"victim/tiny-Q8_0\.gguf already exists and was not downloaded here",
    ),
    Case(
        "header-commit-dotdot",
        "paths",
        BY_NAME,
        _with(commit_header=UP + "victim"),
        r"refusing commit \(X-Repo-Commit from .*\) '(\.\./)+victim': not a 40-character hex commit id",
    ),
    Case("header-commit-branch", "paths", BY_NAME, _with(commit_header="main"), r"refusing commit .*'main'"),
    Case(
        "header-etag-dotdot",
        "paths",
        BY_NAME,
        _with(etag_header=UP + "victim/x.gguf"),
        r"refusing ETag from .* '(\.\./)+victim/x\.gguf': not a content hash nor a plain token",
    ),
    Case("header-etag-slash", "paths", BY_NAME, _with(etag_header="abc/def"), r"refusing ETag .*'abc/def'"),
    Case(
        "snapshot-link-to-victim",
        "paths",
        BY_NAME,
        _link_to_victim,
        r"tiny-Q8_0\.gguf exists and is not a link into the cache's blobs",
    ),
    # answers that are not a hub's
    Case(
        "listing-html",
        "hub answers",
        QUANT,
        _raw("text/html", b"<!doctype html><html><body>Hi</body></html>"),
        NOT_HUB.format("JSONDecodeError"),
    ),
    Case(
        "listing-broken-json",
        "hub answers",
        QUANT,
        _raw("application/json", b'{"id": "acme/x", "siblings": [{'),
        NOT_HUB.format("JSONDecodeError"),
    ),
    Case(
        "listing-json-array", "hub answers", QUANT, _raw("application/json", b"[1, 2, 3]"), NOT_HUB.format("TypeError")
    ),
    Case("listing-no-pointer-size", "hub answers", QUANT, _with(pointer_size=False), NOT_HUB.format("KeyError")),
    Case(
        "files-html",
        "hub answers",
        ("files", REPO, "--endpoint", "{url}"),
        _raw("text/html", b"<html></html>"),
        NOT_HUB.format("JSONDecodeError"),
    ),
    Case(
        "search-html",
        "hub answers",
        ("search", "tiny", "--endpoint", "{url}"),
        _raw("text/html", b"<html></html>"),
        NOT_HUB.format("JSONDecodeError"),
    ),
    Case(
        "redirect-loop-listing", "hub answers", QUANT, _with(redirect_loop=True), r"redirected the request .* in a loop"
    ),
    Case(
        "redirect-loop-file",
        "hub answers",
        BY_NAME,
        _with(redirect_loop=True),
        r"redirected the request for acme/Tiny-GGUF/tiny-Q8_0\.gguf in a loop",
    ),
    Case("no-commit-header", "hub answers", BY_NAME, _with(commit_header=""), r"did not send the commit and ETag"),
    Case("negative-size", "hub answers", BY_NAME, _with(size_header=-5), r"impossible size -5"),
    Case(
        "body-longer-than-announced",
        "hub answers",
        BY_NAME,
        _with(size_header=len(DATA) // 2),
        r"sent more than the 32\.8 KB it announced",
    ),
    Case(
        "short-body",
        "hub answers",
        BY_NAME,
        _with(short_body=True),
        r"lost the connection to .* after 32\.8 KB of 65\.5 KB of tiny-Q8_0\.gguf .*run again to resume",
    ),
    # what the bytes are checked against
    Case("wrong-bytes", "integrity", BY_NAME, _with(corrupt={NAME}), r"failed its SHA-256 check .*deleted"),
    Case(
        "etag-not-a-hash",
        "integrity",
        BY_NAME,
        _with(etag_header="5f2b-1a3"),
        r"specchat: note: tiny-Q8_0\.gguf is unverified: the hub gave no SHA-256",
        exit=0,
    ),
]


def tree(root: Path, skip: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under ``root`` but ``skip``: links by target, files by size, mtime and content hash."""
    found: dict[str, tuple[object, ...]] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if Path(folder, d) != skip]
        for name in dirs + files:
            path = Path(folder, name)
            st = path.lstat()
            key = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                found[key] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                found[key] = ("dir",)
            else:
                found[key] = ("file", st.st_size, st.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return found


_BAR = re.compile(r"\d+%\||B/s|it/s")


def message_lines(stderr: str) -> list[str]:
    """stderr without tqdm's progress-bar redraws."""
    pieces = (p.strip() for line in stderr.split("\n") for p in line.split("\r"))
    return [p for p in pieces if p and not _BAR.search(p)]


@pytest.fixture
def area(tmp_path: Path, hub: FakeHub) -> Ctx:
    for folder in ("home", "tmp", "victim", "dl"):
        (tmp_path / folder).mkdir()
    (tmp_path / "victim" / "x.gguf").write_bytes(VICTIM_BYTES)
    (tmp_path / "victim" / "x-Q8_0.gguf").write_bytes(VICTIM_BYTES)
    return Ctx(hub, tmp_path, tmp_path / "victim")


def specchat(ctx: Ctx, *args: str, popen: bool = False):  # a CompletedProcess, or a Popen with popen=True
    filled = [a.format(url=ctx.hub.url, victim=ctx.victim, tmp=ctx.tmp) for a in args]
    env = {**os.environ, "HOME": str(ctx.tmp / "home"), "TMPDIR": str(ctx.tmp / "tmp")}
    command = [sys.executable, "-m", "specchat", "models", *filled]
    if popen:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_hostile_case_is_one_line_and_nothing_outside_the_cache_changes(case: Case, area: Ctx) -> None:
    case.setup(area)
    before = tree(area.tmp, skip=area.cache)
    out = specchat(area, *case.args)
    assert tree(area.tmp, skip=area.cache) == before
    assert (area.victim / "x.gguf").read_bytes() == VICTIM_BYTES
    assert "Traceback" not in out.stderr
    assert out.returncode == case.exit, out.stderr
    lines = message_lines(out.stderr)
    if case.exit == 2:
        assert len(lines) == 1, out.stderr
        assert lines[0].startswith("specchat: error: ")
        assert re.search(case.expect, lines[0]), lines[0]
    else:
        assert re.search(case.expect, out.stderr), out.stderr
        path = Path(out.stdout.strip().splitlines()[-1])
        assert path.read_bytes() == DATA and area.cache in path.parents


def test_case_table_covers_every_category() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    counts = {cat: sum(c.category == cat for c in CASES) for cat in ("paths", "hub answers", "integrity")}
    assert counts == {"paths": 18, "hub answers": 12, "integrity": 2}  # docs/reliability.md quotes these


def test_refused_names_never_reach_the_server(area: Ctx) -> None:
    _listing(UP + "victim/x-Q8_0.gguf")(area)
    assert specchat(area, *QUANT).returncode == 2
    assert [r.path for r in area.hub.requests if "/resolve/" in r.path] == []
    with pytest.raises(UnsafePathError, match="control character or NUL"):
        download_file(REPO, "x\0.gguf", endpoint=area.hub.url)
    with pytest.raises(UnsafePathError, match="local folder"):
        download_file(REPO, NAME, endpoint=area.hub.url, local_dir=Path("a\0b"))
    assert [r for r in area.hub.requests if "x\0" in r.path or r.method == "HEAD"] == []


def test_a_refused_commit_gets_no_body_request(area: Ctx) -> None:
    _with(commit_header=UP + "victim")(area)
    with pytest.raises(UnsafePathError, match="refusing commit"):
        download_file(REPO, NAME, endpoint=area.hub.url)
    assert [r.method for r in area.hub.requests] == ["HEAD"]


# --- waits: a trickling body or a stalled answer never pins the caller ---


def _download_in_thread(
    hub: FakeHub, token: CancelToken, started: threading.Event
) -> tuple[threading.Thread, dict[str, BaseException]]:
    outcome: dict[str, BaseException] = {}

    def on_progress(event: DownloadProgress) -> None:
        if event.done > 0:
            started.set()

    def run() -> None:
        try:
            download_file(REPO, NAME, endpoint=hub.url, cancel=token, on_progress=on_progress)
        except BaseException as exc:  # noqa: BLE001 - the test reads whatever ended the download
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_cancel_takes_effect_within_seconds_while_the_body_trickles(area: Ctx) -> None:
    _with(trickle=1.0)(area)
    token, started = CancelToken(), threading.Event()
    thread, outcome = _download_in_thread(area.hub, token, started)
    assert started.wait(30), "no byte arrived"
    t0 = time.monotonic()
    token.cancel()
    thread.join(10)
    elapsed = time.monotonic() - t0
    assert isinstance(outcome.get("error"), DownloadCancelledError)
    assert elapsed < 5, f"cancel took {elapsed:.1f} s"
    [partial] = hf_cache_dir().rglob("*.incomplete")
    assert 0 < partial.stat().st_size < len(DATA)
    assert partial.read_bytes() == DATA[: partial.stat().st_size]  # kept for resuming


def test_cancel_takes_effect_while_the_server_sits_on_its_answer(area: Ctx) -> None:
    _with(stall_head=30.0)(area)
    token, started = CancelToken(), threading.Event()
    thread, outcome = _download_in_thread(area.hub, token, started)
    time.sleep(0.5)
    t0 = time.monotonic()
    token.cancel()
    thread.join(10)
    assert isinstance(outcome.get("error"), DownloadCancelledError)
    assert time.monotonic() - t0 < 5


def test_ctrl_c_ends_a_trickling_download_at_once(area: Ctx) -> None:
    _with(trickle=1.0)(area)
    before = tree(area.tmp, skip=area.cache)
    proc = specchat(area, *BY_NAME, popen=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        partials = list(hf_cache_dir().rglob("*.incomplete"))
        if partials and partials[0].stat().st_size > 0:
            break
        time.sleep(0.1)
    else:
        proc.kill()
        proc.communicate()
        pytest.fail("the download never started")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 5
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert message_lines(stderr)[-1].startswith("specchat: download cancelled; the partial file is kept")
    assert tree(area.tmp, skip=area.cache) == before


# --- integrity and what may be replaced ---


def test_an_etag_that_is_no_hash_is_reported_unverified(area: Ctx) -> None:
    _with(etag_header="5f2b-1a3")(area)
    got = download_file(REPO, NAME, endpoint=area.hub.url)
    assert got.path.read_bytes() == DATA
    assert not got.verified and got.verified_by is None
    assert got.path.resolve().name == hashlib.sha256(DATA).hexdigest()  # stored under its own hash
    again = download_file(REPO, NAME, endpoint=area.hub.url)
    assert again.already_present and not again.verified
    assert is_unverified(got.path)  # the blob carries its mark, for the library to read
    local = download_file(REPO, NAME, endpoint=area.hub.url, local_dir=area.tmp / "dl")
    assert local.path.read_bytes() == DATA and not local.verified
    assert is_unverified(local.path)
    area.hub.etag_header = None
    checked = download_file(REPO, NAME, endpoint=area.hub.url, local_dir=area.tmp / "dl2")
    assert checked.verified and checked.verified_by == "SHA-256" and not is_unverified(checked.path)
    # the hub now gives the hash, and the bytes kept under their own hash match it: verified, the mark goes
    cached = download_file(REPO, NAME, endpoint=area.hub.url)
    assert cached.already_present and cached.verified and not is_unverified(cached.path)
    assert len(area.hub.gets(NAME)) == 3  # the first download and the two local ones: nothing fetched again


def test_a_kept_unverified_blob_the_hub_disagrees_with_is_downloaded_again(area: Ctx) -> None:
    _with(etag_header="5f2b-1a3")(area)
    first = download_file(REPO, NAME, endpoint=area.hub.url)
    assert is_unverified(first.path)
    area.hub.repos[REPO][NAME] = changed = DATA[::-1]  # same commit, other bytes, and now a real hash
    area.hub.etag_header = None
    second = download_file(REPO, NAME, endpoint=area.hub.url)
    assert not second.already_present and second.verified and second.path == first.path
    assert second.path.read_bytes() == changed and not is_unverified(second.path)


def test_only_our_own_pointer_is_replaced(area: Ctx) -> None:
    _serve(area)
    got = download_file(REPO, NAME, endpoint=area.hub.url)
    blob = got.path.resolve()
    blob.unlink()  # the pointer now dangles into blobs: ours, so it may be remade
    again = download_file(REPO, NAME, endpoint=area.hub.url)
    assert again.path == got.path and not again.already_present and again.path.read_bytes() == DATA
    assert again.path.is_symlink()

    got.path.unlink()
    got.path.write_bytes(b"someone else's file")  # a plain file where the pointer was: never unlinked
    with pytest.raises(DownloadStorageError, match="not a link into the cache's blobs"):
        download_file(REPO, NAME, endpoint=area.hub.url)
    assert got.path.read_bytes() == b"someone else's file"


def test_local_dir_replaces_only_files_it_downloaded(area: Ctx) -> None:
    _serve(area)
    folder = area.tmp / "dl"
    got = download_file(REPO, NAME, endpoint=area.hub.url, local_dir=folder)
    got.path.write_bytes(b"truncated")  # ours (its metadata exists): a rerun repairs it
    again = download_file(REPO, NAME, endpoint=area.hub.url, local_dir=folder)
    assert not again.already_present and again.path.read_bytes() == DATA
    mine = area.tmp / "mine"
    mine.mkdir()
    (mine / NAME).write_bytes(VICTIM_BYTES)
    with pytest.raises(DownloadStorageError, match="already exists and was not downloaded here"):
        download_file(REPO, NAME, endpoint=area.hub.url, local_dir=mine)
    assert (mine / NAME).read_bytes() == VICTIM_BYTES
    assert not (mine / ".cache").exists()
