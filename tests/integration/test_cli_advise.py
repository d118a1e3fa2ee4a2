"""``specchat models advise`` in a real subprocess: the table, JSON, bad input in one line, Ctrl-C."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parents[1] / "models"


def env() -> dict[str, str]:
    # Passive OpenMP threads: the tests share a few cores, where spinning threads slow llama.cpp down badly.
    return {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}


def advise(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specchat", "models", "advise", *map(str, args)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env(),
        timeout=600,
    )


def one_error_line(out: subprocess.CompletedProcess[str], expected: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("specchat: error: ") and expected in lines[0], lines[0]
    assert out.stdout == ""


def test_the_table_ranks_the_candidates_with_progress_on_stderr(tmp_path: Path, demo_pair) -> None:
    target = tmp_path / "target.gguf"
    shutil.copy(MODELS / "llama.gguf", target)
    out = advise(
        target,
        "--candidates",
        MODELS / "llama-q8.gguf",
        MODELS / "llama-seed2-q8.gguf",
        demo_pair.draft,
        "--no-library",
        "--budget-seconds",
        "60",
    )
    assert out.returncode == 0, out.stderr
    assert "plain decoding: chat prompt" in out.stderr and "[" in out.stderr.splitlines()[0]
    lines = out.stdout.splitlines()
    assert lines[0].split()[:4] == ["#", "candidate", "kind", "accept"]
    rows = {line.split()[1]: line for line in lines[2:] if line[:2].strip().isdigit()}
    assert set(rows) == {"llama-q8.gguf", "llama-seed2-q8.gguf", "n-gram", demo_pair.draft.name}
    assert "accepts only 0% of drafts" in rows["llama-seed2-q8.gguf"]
    assert "incompatible: different tokenizers" in rows[demo_pair.draft.name]
    assert rows[demo_pair.draft.name] == lines[len(rows) + 1]  # refused files come last
    assert lines[-1].startswith(("use ", "none of the candidates"))


def quantized(source: Path, dest: Path, quant: str) -> Path:
    """``source`` requantized by llama.cpp's quantizer (a generated draft of another cost and agreement)."""
    import llama_cpp

    from specchat.core.llama.backend import ensure_backend

    ensure_backend()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{quant}")
    params.allow_requantize = True
    assert llama_cpp.llama_model_quantize(str(source).encode(), str(dest).encode(), params) == 0
    return dest


@pytest.mark.slow
def test_json_on_the_demo_target_ranks_explains_and_refuses(demo_pair, tmp_path: Path) -> None:
    q8 = quantized(demo_pair.target, tmp_path / "demo-Q8_0.gguf", "Q8_0")
    foreign = tmp_path / "foreign.gguf"
    data = bytearray(demo_pair.draft.read_bytes())
    old = "Ġthe".encode()
    at = data.find(len(old).to_bytes(8, "little") + old)
    data[at + 8 : at + 8 + len(old)] = "Ġteh".encode()
    foreign.write_bytes(bytes(data))
    out = advise(
        demo_pair.target,
        "--candidates",
        demo_pair.draft,
        q8,
        foreign,
        "--no-library",
        "--budget-seconds",
        "60",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    advice = json.loads(out.stdout)
    by_label = {c["label"]: c for c in advice["candidates"]}
    for name in (demo_pair.draft.name, q8.name):
        draft = by_label[name]
        assert draft["kind"] == "draft" and draft["prediction"] is not None, draft
        # Greedy: the Q4_1 draft agrees with its own F32 copy, and a Q8_0 of that copy agrees nearly always.
        assert draft["prediction"]["acceptance"] > 0.5
        assert draft["memory_bytes"] > demo_pair.target.stat().st_size
        assert len(draft["prediction"]["tokens_per_second_by_depth"]) == 9  # plain, then depths 1-8
        assert draft["why"]
    measured = [c for c in advice["candidates"] if c["prediction"] is not None]
    speedups = [c["prediction"]["speedup"] for c in measured]
    assert speedups == sorted(speedups, reverse=True)
    assert [c["kind"] for c in advice["candidates"][len(measured) :]] == ["catalog", "incompatible"]
    assert by_label["foreign.gguf"]["kind"] == "incompatible"
    assert by_label["foreign.gguf"]["why"].startswith("incompatible: token ")
    assert by_label["foreign.gguf"]["why"].endswith(" differs")
    catalog = [c for c in advice["candidates"] if c["kind"] == "catalog"]
    assert catalog and catalog[0]["why"].startswith("download to try (0.14 GB")
    if advice["winner"] is not None:
        winner = advice["candidates"][0]
        assert winner["label"] == advice["winner"] and winner["measured"]["identical"] is True


def test_bad_input_is_one_line(tmp_path: Path, demo_pair) -> None:
    one_error_line(advise(tmp_path / "missing.gguf"), "target model not found")
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(demo_pair.draft.read_bytes()[:3_000_000])
    one_error_line(advise(broken, "--no-library"), "broken.gguf")
    one_error_line(advise(MODELS / "llama.gguf", "--candidates", tmp_path / "nope.gguf"), "candidate not found")
    alone = tmp_path / "alone" / "llama.gguf"  # tests/models also holds drafter heads that fit llama.gguf
    alone.parent.mkdir()
    shutil.copy(MODELS / "llama.gguf", alone)
    one_error_line(
        advise(alone, "--candidates", demo_pair.draft, "--no-library", "--no-lookup"),
        "no candidate drafter can run for llama.gguf (SmolLM2-135M-Instruct.Q4_1.gguf: incompatible",
    )
    one_error_line(advise(MODELS / "llama.gguf", "--budget-seconds", "-3"), "--budget-seconds must be a positive")


def test_ctrl_c_cancels_cleanly() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specchat",
            "models",
            "advise",
            str(MODELS / "llama.gguf"),
            "--candidates",
            str(MODELS / "llama-q8.gguf"),
            "--no-library",
            "--budget-seconds",
            "600",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "llama-q8.gguf: chat prompt" in line:
            proc.send_signal(signal.SIGINT)
            break
    stdout, rest = proc.communicate(timeout=120)
    assert proc.returncode == 130, (seen, rest)
    assert stdout == ""
    assert rest.strip().splitlines()[-1] == "specchat: advise cancelled"
    assert "Traceback" not in rest


@pytest.fixture()
def special_files(tmp_path: Path) -> dict[str, Path]:
    """A FIFO named like a model, a symlink loop, and a device: none may be opened as a model."""
    (tmp_path / "models").mkdir()
    fifo, loop = tmp_path / "models" / "pipe.gguf", tmp_path / "loop.gguf"
    os.mkfifo(fifo)
    loop.symlink_to(loop)
    return {"a FIFO (named pipe)": fifo, "a symlink loop": loop, "a device": Path("/dev/zero")}


def test_special_files_are_never_opened_as_models(special_files: dict[str, Path]) -> None:
    """Each is named for what it is (not "not found"); a FIFO as the target or next to it hangs nothing."""
    for kind, path in special_files.items():
        one_error_line(advise(MODELS / "llama.gguf", "--candidates", path), f"candidate is not a file but {kind}")
    fifo = special_files["a FIFO (named pipe)"]
    one_error_line(advise(fifo), "target model is not a file but a FIFO")
    listed = subprocess.run(
        [sys.executable, "-m", "specchat", "models", "list", "--dir", str(fifo.parent)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env(),
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert f"specchat: skipped: cannot read {fifo}: it is a FIFO (named pipe), not a file" in listed.stderr
    (fifo.parent / "twin.gguf").symlink_to(fifo.parent / "twin.gguf")  # a symlink loop in a listed folder
    looped = subprocess.run(
        [sys.executable, "-m", "specchat", "models", "list", "--dir", str(fifo.parent)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env(),
        timeout=120,
    )
    assert looped.returncode == 0 and "internal error" not in looped.stderr, looped.stderr


def test_ctrl_c_ends_a_search_of_the_whole_disk() -> None:
    """``--candidates /`` walks every folder: Ctrl-C stops the walk, before anything is measured."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specchat",
            "models",
            "advise",
            str(MODELS / "llama.gguf"),
            "--candidates",
            "/",
            "--no-library",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()
    assert "searching the named folders" in first, first
    proc.send_signal(signal.SIGINT)
    stdout, rest = proc.communicate(timeout=120)
    assert proc.returncode == 130, rest
    assert stdout == "" and rest.strip().splitlines() == ["specchat: advise cancelled"]
