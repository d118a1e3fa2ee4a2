"""The demo target's record checks content, and killed conversions leave nothing behind."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specchat.core.models.demo import (
    TARGET_FILENAME,
    cached_file_is_valid,
    provision_demo_pair,
    sample_offsets,
    sampled_sha256,
)
from specchat.core.models.download import pid_alive, remove_orphaned_parts


def _copy_target(demo_pair, folder: Path) -> Path:
    """The session's converted target and its record, copied with their mtimes (no second conversion)."""
    dest = folder / "demo"
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / TARGET_FILENAME
    shutil.copy2(demo_pair.target, target)
    side = Path(str(demo_pair.target) + ".json")
    record = json.loads(side.read_text())
    record["mtime_ns"] = target.stat().st_mtime_ns
    Path(str(target) + ".json").write_text(json.dumps(record))
    return target


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_sample_offsets_cover_first_last_and_spread_blocks() -> None:
    size = 100 * 1024 * 1024
    offsets = sample_offsets(size)
    assert offsets[0] == 0 and offsets[-1] == size - 64 * 1024 and len(offsets) == 18
    assert offsets == sorted(set(offsets))
    assert sample_offsets(1000) == [0]  # a file smaller than a block is read whole


def test_a_byte_altered_in_a_sampled_block_with_mtime_restored_is_rebuilt(demo_pair, tmp_path: Path) -> None:
    target = _copy_target(demo_pair, tmp_path)
    assert cached_file_is_valid(target)
    st = target.stat()
    original = hashlib.sha256(target.read_bytes()).hexdigest()
    where = sample_offsets(st.st_size)[7] + 1234
    with target.open("r+b") as f:
        f.seek(where)
        byte = f.read(1)
        f.seek(where)
        f.write(bytes([byte[0] ^ 0x01]))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_mtime_ns == st.st_mtime_ns and target.stat().st_size == st.st_size
    assert not cached_file_is_valid(target)
    again = provision_demo_pair(tmp_path)
    assert again.converted and again.target == target
    assert hashlib.sha256(target.read_bytes()).hexdigest() == original
    assert cached_file_is_valid(target)


def test_a_record_without_the_sampled_hash_is_checked_in_full_and_upgraded(demo_pair, tmp_path: Path) -> None:
    target = _copy_target(demo_pair, tmp_path)
    side = Path(str(target) + ".json")
    record = json.loads(side.read_text())
    del record["sample"]
    side.write_text(json.dumps(record))
    assert cached_file_is_valid(target)
    assert json.loads(side.read_text())["sample"]["sha256"] == sampled_sha256(target)
    record["sha256"] = "0" * 64  # an old record that does not match is not trusted
    side.write_text(json.dumps(record))
    assert not cached_file_is_valid(target)


def test_orphaned_part_files_go_but_live_and_resumable_ones_stay(tmp_path: Path) -> None:
    dead = tmp_path / f"{TARGET_FILENAME}.part{_dead_pid()}"
    live_proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = tmp_path / f"{TARGET_FILENAME}.part{live_proc.pid}"
        old = tmp_path / f"{TARGET_FILENAME}.part{os.getppid()}"
        mine = tmp_path / f"{TARGET_FILENAME}.part{os.getpid()}"
        resumable = tmp_path / "blob.incomplete"
        other = tmp_path / "other.gguf.part1"
        for path in (dead, live, old, mine, resumable, other):
            path.write_bytes(b"x" * 10)
        os.utime(live, (time.time() - 3 * 86400,) * 2)  # its writer is alive and it is not that old...
        os.utime(old, (time.time() - 8 * 86400,) * 2)  # a live PID, but not written for 8 days: reused
        removed = remove_orphaned_parts(tmp_path, TARGET_FILENAME, stale_after=7 * 86400)
        assert sorted(removed) == sorted([dead, old])
        assert live.exists() and mine.exists() and resumable.exists() and other.exists()
        assert remove_orphaned_parts(tmp_path, TARGET_FILENAME, stale_after=86400) == [live]  # ...or too old
    finally:
        live_proc.kill()
        live_proc.wait()
    assert pid_alive(os.getpid()) and not pid_alive(_dead_pid()) and not pid_alive(0)


def test_a_killed_conversion_leaves_a_part_file_that_the_next_run_removes(demo_pair, tmp_path: Path) -> None:
    folder = tmp_path / "killed"
    code = (
        "import sys; from pathlib import Path; from specchat.core.models.demo import provision_demo_pair; "
        "provision_demo_pair(Path(sys.argv[1]))"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(folder)])
    part = folder / "demo" / f"{TARGET_FILENAME}.part{proc.pid}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (part.exists() and part.stat().st_size > 1 << 20):
        if proc.poll() is not None:
            pytest.fail("the conversion ended before it could be killed")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert part.exists()
    _copy_target(demo_pair, folder)  # a valid target is there: the run does not convert again
    pair = provision_demo_pair(folder)
    assert not pair.converted
    assert not part.exists()
    assert sorted(p.name for p in (folder / "demo").iterdir()) == [TARGET_FILENAME, TARGET_FILENAME + ".json"]
