"""``specchat models ...`` in a subprocess, against the loopback hub."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specchat.core.models.hfcache import hf_cache_dir

REPO = "acme/Tiny-GGUF"


def specchat(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specchat", "models", *args],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


@pytest.fixture
def served(hub, make_gguf):
    data = make_gguf("tiny-Q8_0.gguf", tensor_elements=512 * 1024).read_bytes()
    hub.add(REPO, "tiny-Q8_0.gguf", data)
    hub.add(REPO, "tiny-Q4_K_M.gguf", data[:1000])
    hub.data = data
    return hub


def test_download_by_quant_prints_the_path_last(served) -> None:
    out = specchat("download", REPO, "--quant", "q8_0", "--endpoint", served.url)
    assert out.returncode == 0, out.stderr
    path = Path(out.stdout.strip().splitlines()[-1])
    assert path.read_bytes() == served.data
    assert str(hf_cache_dir()) in str(path)
    assert "tiny-Q8_0.gguf" in out.stderr and "100%" in out.stderr  # the tqdm bar


def test_download_by_name_with_hf_endpoint_and_list_sees_it(served, tmp_path: Path) -> None:
    out = specchat("download", REPO, "tiny-Q8_0.gguf", "--local-dir", str(tmp_path / "dl"), HF_ENDPOINT=served.url)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(tmp_path / "dl" / "tiny-Q8_0.gguf")
    listed = specchat("list", "--json", "--dir", str(tmp_path / "dl"))
    assert listed.returncode == 0, listed.stderr
    [entry] = [e for e in json.loads(listed.stdout) if e["source"] == "user"]
    assert entry["quant"] == "Q8_0" and entry["file_size"] == len(served.data)


def test_list_says_which_downloads_are_unverified(served, tmp_path: Path) -> None:
    """A file the hub gave no SHA-256 for is listed as unverified, in the table, the notes and the JSON."""
    home = {"HOME": str(tmp_path / "home"), "LLAMA_CACHE": str(tmp_path / "none"), "SPECCHAT_MODEL_DIRS": ""}
    checked = specchat("download", REPO, "tiny-Q8_0.gguf", "--endpoint", served.url)
    assert checked.returncode == 0 and "unverified" not in checked.stderr
    served.etag_header = "5f2b-1a3"  # a mirror's ETag that is no content hash
    served.add("acme/Other-GGUF", "other-Q8_0.gguf", served.data)
    cached = specchat("download", "acme/Other-GGUF", "other-Q8_0.gguf", "--endpoint", served.url)
    local = specchat("download", REPO, "tiny-Q8_0.gguf", "--local-dir", str(tmp_path / "dl"), "--endpoint", served.url)
    assert local.returncode == cached.returncode == 0 and "tiny-Q8_0.gguf is unverified" in local.stderr
    odd, odd_cached, good = (Path(out.stdout.strip()) for out in (local, cached, checked))

    listed = specchat("list", "--dir", str(tmp_path / "dl"), **home)
    assert listed.returncode == 0, listed.stderr
    rows = {line.rsplit(" ", 1)[-1]: line for line in listed.stdout.splitlines()}
    assert rows[str(odd)].endswith(f"user      unverified {odd}")
    assert rows[str(odd_cached)].endswith(f"hf-cache  unverified {odd_cached}")
    assert "unverified" not in rows[str(good)]
    notes = {line for line in listed.stderr.splitlines() if line.startswith("specchat: note:")}
    assert notes == {
        f"specchat: note: {path} is unverified: the hub gave no SHA-256 for it, only its size was checked"
        for path in (odd, odd_cached)
    }
    as_json = specchat("list", "--json", "--dir", str(tmp_path / "dl"), **home)
    flags = {e["path"]: e["unverified"] for e in json.loads(as_json.stdout)}
    assert flags == {str(odd): True, str(odd_cached): True, str(good): False}


def test_download_errors_exit_2_with_one_line(served) -> None:
    missing = specchat("download", "acme/none", "x.gguf", "--endpoint", served.url)
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"specchat: error: repository acme/none not found on {served.url}"
    served.gated.add(REPO)
    gated = specchat("download", REPO, "--quant", "Q8_0", "--endpoint", served.url)
    assert gated.returncode == 2 and "is gated" in gated.stderr and "HF_TOKEN" in gated.stderr
    both = specchat("download", REPO, "a.gguf", "--quant", "Q8_0", "--endpoint", served.url)
    assert both.returncode == 2 and "either a FILENAME or --quant" in both.stderr


def test_ctrl_c_keeps_the_partial_and_the_rerun_resumes(served) -> None:
    """The hub holds the body after 64 KiB until released, so the interrupt lands mid-download however fast
    the machine is; the rerun asks for the rest by range."""
    served.hold_after = 64 * 1024
    proc = subprocess.Popen(
        [sys.executable, "-m", "specchat", "models", "download", REPO, "tiny-Q8_0.gguf", "--endpoint", served.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120  # a guard against a hang, not a timing
    partial: list[Path] = []
    while not (partial and partial[0].stat().st_size == served.hold_after):
        assert time.monotonic() < deadline and proc.poll() is None, "the download never reached the held byte"
        partial = list(hf_cache_dir().rglob("*.incomplete"))
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "partial file is kept" in stderr and stdout == ""
    kept = partial[0].stat().st_size
    assert kept == served.hold_after < len(served.data)

    served.hold_after = None
    served.release.set()
    out = specchat("download", REPO, "tiny-Q8_0.gguf", "--endpoint", served.url)
    assert out.returncode == 0, out.stderr
    last = served.gets("tiny-Q8_0.gguf")[-1]
    assert last.range == f"bytes={kept}-" and last.sent == len(served.data) - kept
    assert Path(out.stdout.strip()).read_bytes() == served.data


def test_search_files_and_catalog(served) -> None:
    search = specchat("search", "tiny", "--endpoint", served.url)
    assert search.returncode == 0 and search.stdout.split()[0] == REPO
    files = specchat("files", REPO, "--endpoint", served.url)
    assert files.returncode == 0
    assert [line.split()[:2] for line in files.stdout.splitlines()] == [
        ["tiny-Q4_K_M.gguf", "Q4_K_M"],
        ["tiny-Q8_0.gguf", "Q8_0"],
    ]
    catalog = specchat("catalog", "--json")
    assert catalog.returncode == 0 and json.loads(catalog.stdout)[0]["id"] == "demo"
    assert "qwen3-8b" in specchat("catalog").stdout


def test_pair_downloads_both_halves(hub, make_gguf, monkeypatch) -> None:
    from specchat.core.models.catalog import get_pair

    pair = get_pair("qwen3-8b")
    assert pair.draft is not None  # a draft-model pair
    t = make_gguf("Qwen3-8B-Q4_K_M.gguf", tensor_elements=8192).read_bytes()
    d = make_gguf("Qwen3-0.6B-Q8_0.gguf").read_bytes()
    hub.add(pair.target.repo, "Qwen3-8B-Q4_K_M.gguf", t)
    hub.add(pair.target.repo, "Qwen3-8B-Q8_0.gguf", b"not this one")
    hub.add(pair.draft.repo, "Qwen3-0.6B-Q8_0.gguf", d)
    out = specchat("pair", "qwen3-8b", "--endpoint", hub.url)
    assert out.returncode == 0, out.stderr
    paths = json.loads(out.stdout)
    assert Path(paths["target"]).read_bytes() == t and Path(paths["draft"]).read_bytes() == d
    check = specchat("check", paths["target"], paths["draft"])
    assert check.returncode == 0 and check.stdout.startswith("compatible")


def test_importing_the_cli_module_stays_light() -> None:
    code = (
        "import sys, specchat.cli.models, specchat.core.models.catalog, specchat.core.models.compat, "
        "specchat.core.models.library, specchat.core.models.download;"
        "bad=[m for m in ('llama_cpp','PySide6','huggingface_hub','gguf','tqdm') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
