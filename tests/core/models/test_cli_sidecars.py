"""``specchat models files / download / pair`` with drafter sidecars, in a subprocess against the loopback hub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.heads import REPO, dflash, eagle3, target


def specchat(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specchat", "models", *args],
        check=False,
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )


def test_files_marks_sidecars_and_download_offers_then_fetches_them(hub, make_gguf) -> None:
    data = {
        "Llama-3.1-8B-Instruct-Q4_K_M.gguf": target(make_gguf).read_bytes(),
        "eagle3-Llama-3.1-8B-Instruct-Q8_0.gguf": eagle3(make_gguf).read_bytes(),
        "dflash-Llama-3.1-8B-Q4_0.gguf": dflash(make_gguf).read_bytes(),
    }
    for name, blob in data.items():
        hub.add(REPO, name, blob)
    files = specchat("files", REPO, "--endpoint", hub.url)
    assert files.returncode == 0, files.stderr
    rows = {line.split()[0]: line for line in files.stdout.splitlines()}
    assert rows["eagle3-Llama-3.1-8B-Instruct-Q8_0.gguf"].endswith("sidecar: EAGLE-3 head")
    assert rows["dflash-Llama-3.1-8B-Q4_0.gguf"].endswith("sidecar: DFlash head")
    assert "sidecar" not in rows["Llama-3.1-8B-Instruct-Q4_K_M.gguf"]

    plain = specchat("download", REPO, "--quant", "Q4_K_M", "--endpoint", hub.url)
    assert plain.returncode == 0, plain.stderr
    assert [Path(p).name for p in plain.stdout.split()] == ["Llama-3.1-8B-Instruct-Q4_K_M.gguf"]
    assert (
        "also holds a eagle3 sidecar for this model: eagle3-Llama-3.1-8B-Instruct-Q8_0.gguf; add --sidecar eagle3"
    ) in plain.stderr
    assert not hub.gets("eagle3-Llama-3.1-8B-Instruct-Q8_0.gguf")

    one = specchat("download", REPO, "--quant", "Q4_K_M", "--sidecar", "dflash", "--endpoint", hub.url)
    assert one.returncode == 0, one.stderr
    assert [Path(p).name for p in one.stdout.split()] == [
        "dflash-Llama-3.1-8B-Q4_0.gguf",
        "Llama-3.1-8B-Instruct-Q4_K_M.gguf",
    ]  # the model last
    every = specchat("download", REPO, "Llama-3.1-8B-Instruct-Q4_K_M.gguf", "--with-sidecars", "--endpoint", hub.url)
    assert every.returncode == 0, every.stderr
    paths = [Path(p) for p in every.stdout.split()]
    assert {p.name: p.read_bytes() for p in paths} == data

    missing = specchat("download", REPO, "--quant", "Q4_K_M", "--sidecar", "dspark", "--endpoint", hub.url)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.strip().splitlines()[-1].startswith("specchat: error: no dspark sidecar beside ")


def test_pair_names_the_targets_sidecars_and_fetches_them_when_asked(hub, make_gguf) -> None:
    from specchat.core.models.catalog import get_pair

    pair = get_pair("qwen3-8b")
    assert pair.draft is not None  # a draft-model pair
    hub.add(pair.target.repo, "Qwen3-8B-Q4_K_M.gguf", make_gguf("Qwen3-8B-Q4_K_M.gguf").read_bytes())
    hub.add(pair.target.repo, "dflash-Qwen3-8B-Q8_0.gguf", dflash(make_gguf).read_bytes())
    hub.add(pair.draft.repo, "Qwen3-0.6B-Q8_0.gguf", make_gguf("Qwen3-0.6B-Q8_0.gguf").read_bytes())
    out = specchat("pair", "qwen3-8b", "--endpoint", hub.url)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["sidecars"] == {}
    assert "also holds a dflash sidecar for the target: dflash-Qwen3-8B-Q8_0.gguf" in out.stderr
    fetched = specchat("pair", "qwen3-8b", "--with-sidecars", "--endpoint", hub.url)
    assert fetched.returncode == 0, fetched.stderr
    assert Path(json.loads(fetched.stdout)["sidecars"]["dflash"]).name == "dflash-Qwen3-8B-Q8_0.gguf"
