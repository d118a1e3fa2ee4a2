"""Path checks of the hub cache layout: every server- or user-given segment before it becomes a path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specchat.core.models import hfcache
from specchat.core.models.errors import UnsafePathError

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHA256 = "a" * 64


@pytest.mark.parametrize("name", ["model.gguf", "sub/dir/model-Q4_K_M.gguf", "a..b.gguf", ".hidden.gguf", "ü/名.gguf"])
def test_plain_relative_names_pass(name: str) -> None:
    assert hfcache.check_relative_path(name) == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../../../../x.gguf", "'..' segment"),
        ("a/../../b.gguf", "'..' segment"),
        ("./x.gguf", "'..' segment"),
        ("a//b.gguf", "empty"),
        ("a/", "empty"),
        ("", "empty or not text"),
        ("/abs/path/x.gguf", "absolute"),
        ("C:/x.gguf", "absolute"),
        ("c:x.gguf", "absolute"),
        ("a\\..\\b.gguf", "backslash"),
        ("x\0.gguf", "control character or NUL"),
        ("x\n.gguf", "control character or NUL"),
        ("x" * 300 + ".gguf", "longer than 255 bytes"),
        (5, "not text"),
        (None, "not text"),
    ],
)
def test_escaping_names_are_refused_naming_the_value(name: object, why: str) -> None:
    with pytest.raises(UnsafePathError, match=why) as info:
        hfcache.check_relative_path(name)
    message = str(info.value)
    assert "\n" not in message and message.startswith("refusing file name ")
    assert repr(name)[:40] in message


@pytest.mark.parametrize("commit", ["../../x", "main", COMMIT.upper(), COMMIT[:39], COMMIT + "0", "", None])
def test_commit_ids_must_be_40_hex(commit: object) -> None:
    with pytest.raises(UnsafePathError, match="40-character hex commit id"):
        hfcache.check_commit(commit)
    assert hfcache.check_commit(COMMIT) == COMMIT


@pytest.mark.parametrize("blob", ["../x", SHA256.upper(), "abc", SHA256 + "/x", "", None])
def test_blob_names_must_be_hashes(blob: object) -> None:
    with pytest.raises(UnsafePathError, match="SHA-256 or SHA-1"):
        hfcache.check_blob_name(blob)
    assert hfcache.check_blob_name(SHA256) == SHA256
    assert hfcache.check_blob_name(COMMIT) == COMMIT


@pytest.mark.parametrize("etag", ["../../../x", "a/b", "a\\b", "..", "x..y", "", "-x", "a b", "x\0"])
def test_etags_with_separators_or_odd_characters_are_refused(etag: str) -> None:
    with pytest.raises(UnsafePathError, match="not a content hash nor a plain token"):
        hfcache.check_etag(etag)


@pytest.mark.parametrize("etag", [SHA256, COMMIT, "d41d8cd98f00b204e9800998ecf8427e-12", "5f2b-1a3"])
def test_hash_and_token_etags_pass(etag: str) -> None:
    assert hfcache.check_etag(etag) == etag


@pytest.mark.parametrize("repo", ["../../x", "a/b/c", "a--b", "a/..", "", "a/b\0"])
def test_repo_ids_are_checked_by_huggingface_hub(tmp_path: Path, repo: str) -> None:
    with pytest.raises(UnsafePathError, match="refusing repository id"):
        hfcache.repo_folder(tmp_path, repo)
    assert hfcache.repo_folder(tmp_path, "org/name") == tmp_path / "models--org--name"


def test_layout_paths_stay_inside(tmp_path: Path) -> None:
    storage = hfcache.repo_folder(tmp_path, "org/name")
    assert hfcache.snapshot_file(storage, COMMIT, "d/m.gguf") == storage / "snapshots" / COMMIT / "d" / "m.gguf"
    assert hfcache.blob_file(storage, SHA256) == storage / "blobs" / SHA256
    assert hfcache.ref_file(storage, "refs/pr/1") == storage / "refs" / "refs" / "pr" / "1"
    assert hfcache.lock_file(tmp_path, storage, SHA256) == tmp_path / ".locks" / storage.name / f"{SHA256}.lock"
    with pytest.raises(UnsafePathError):
        hfcache.ref_file(storage, "../../../x")
    with pytest.raises(UnsafePathError):
        hfcache.snapshot_file(storage, "../..", "x.gguf")


def test_a_symlinked_folder_leading_outside_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    base = tmp_path / "base"
    base.mkdir()
    (base / "sub").symlink_to(outside)
    with pytest.raises(UnsafePathError, match="leads outside"):
        hfcache.inside(base, "sub/x.gguf")
    inner = base / "real"
    inner.mkdir()
    (base / "alias").symlink_to(inner)
    assert hfcache.inside(base, "alias/x.gguf") == base / "alias" / "x.gguf"


def test_local_dir_names_and_metadata_folder(tmp_path: Path) -> None:
    assert hfcache.local_file(tmp_path, "m.gguf") == tmp_path / "m.gguf"
    with pytest.raises(UnsafePathError, match="metadata folder"):
        hfcache.local_file(tmp_path, ".cache/huggingface/download/m.gguf.metadata")
    meta = hfcache.local_meta_file(tmp_path, "d/m.gguf", ".metadata")
    assert meta == tmp_path / ".cache" / "huggingface" / "download" / "d" / "m.gguf.metadata"
    with pytest.raises(UnsafePathError, match="local folder"):
        hfcache.check_local_dir("")
    with pytest.raises(UnsafePathError, match="local folder"):
        hfcache.check_local_dir("a\0b")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UnsafePathError, match="not a folder"):
        hfcache.check_local_dir(tmp_path / "file")


def test_points_into_only_for_links_into_that_folder(tmp_path: Path) -> None:
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    (blobs / SHA256).write_bytes(b"x")
    good = tmp_path / "good"
    good.symlink_to(os.path.relpath(blobs / SHA256, tmp_path))
    dangling = tmp_path / "dangling"
    dangling.symlink_to(blobs / "gone")
    (tmp_path / "victim").write_bytes(b"v")
    bad = tmp_path / "bad"
    bad.symlink_to(tmp_path / "victim")
    plain = tmp_path / "plain"
    plain.write_bytes(b"p")
    assert hfcache.points_into(good, blobs) and hfcache.points_into(dangling, blobs)
    assert not hfcache.points_into(bad, blobs) and not hfcache.points_into(plain, blobs)


def test_the_cache_folder_is_read_at_call_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hfcache.hf_cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert hfcache.hf_cache_dir() == tmp_path / "elsewhere"


def test_refs_snapshots_and_repo_ids_are_read_through_the_checks(tmp_path: Path) -> None:
    storage = hfcache.repo_folder(tmp_path, "org/name")
    ref = hfcache.ref_file(storage, "main")
    ref.parent.mkdir(parents=True)
    ref.write_text(COMMIT + "\n")
    assert hfcache.read_ref(storage) == COMMIT
    snapshot = hfcache.snapshot_folder(storage, COMMIT)
    (snapshot / "sub").mkdir(parents=True)
    (snapshot / "a-Q8_0.gguf").write_bytes(b"x")
    (snapshot / "sub" / "b-Q4_0.GGUF").write_bytes(b"x")
    (snapshot / "README.md").write_text("x")
    (snapshot / "gone.gguf").symlink_to(storage / "blobs" / SHA256)  # a pointer whose blob was deleted
    assert hfcache.snapshot_files(storage, COMMIT) == ["a-Q8_0.gguf", "sub/b-Q4_0.GGUF"]
    assert hfcache.repo_id_of(snapshot / "a-Q8_0.gguf") == "org/name"
    assert hfcache.repo_id_of(tmp_path / "x.gguf") is None

    ref.write_text("../../../../outside")  # a ref that would lead out of the cache is refused, not followed
    with pytest.raises(UnsafePathError, match="commit in refs/main"):
        hfcache.read_ref(storage)
    with pytest.raises(UnsafePathError, match="40-character hex commit id"):
        hfcache.snapshot_folder(storage, "..")


def test_partial_and_mark_names_stay_in_blobs(tmp_path: Path) -> None:
    storage = hfcache.repo_folder(tmp_path, "org/name")
    assert hfcache.incomplete_file(storage, SHA256) == storage / "blobs" / f"{SHA256}.incomplete"
    assert hfcache.incomplete_file(storage, "etag-" + COMMIT) == storage / "blobs" / f"etag-{COMMIT}.incomplete"
    assert hfcache.unverified_mark(storage, SHA256) == storage / "blobs" / f"{SHA256}.unverified"
    for bad in ("../x", "a/b", ".."):
        with pytest.raises(UnsafePathError, match="partial file name"):
            hfcache.incomplete_file(storage, bad)
    with pytest.raises(UnsafePathError, match="SHA-256 or SHA-1"):
        hfcache.unverified_mark(storage, "../x")


def test_unverified_is_told_by_the_blob_mark_or_the_local_metadata(tmp_path: Path) -> None:
    storage = hfcache.repo_folder(tmp_path / "cache", "org/name")
    blob = hfcache.blob_file(storage, SHA256)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"x")
    pointer = hfcache.snapshot_file(storage, COMMIT, "m.gguf")
    pointer.parent.mkdir(parents=True)
    pointer.symlink_to(os.path.relpath(blob, pointer.parent))
    assert not hfcache.is_unverified(pointer)
    hfcache.unverified_mark(storage, SHA256).write_text("5f2b-1a3\n")
    assert hfcache.is_unverified(pointer)

    local = tmp_path / "dl"
    for name, etag in (("sub/odd.gguf", "5f2b-1a3"), ("hashed.gguf", SHA256)):
        hfcache.local_file(local, name).parent.mkdir(parents=True, exist_ok=True)
        hfcache.local_file(local, name).write_bytes(b"x")
        meta = hfcache.local_meta_file(local, name, ".metadata")
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(f"{COMMIT}\n{etag}\n0\n")
    assert hfcache.is_unverified(local / "sub" / "odd.gguf", root=local)
    assert not hfcache.is_unverified(local / "hashed.gguf", root=local)
    (local / "mine.gguf").write_bytes(b"x")  # no download made it: nothing is known, nothing is claimed
    assert not hfcache.is_unverified(local / "mine.gguf", root=local)
    # the search for metadata stops at the root it is given
    assert not hfcache.is_unverified(local / "sub" / "odd.gguf", root=local / "sub")
