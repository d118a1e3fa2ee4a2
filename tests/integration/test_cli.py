"""``specchat chat`` and ``specchat bench`` as a user runs them, bad input included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.core.engine.depth import DepthControl
from specchat.core.runtime.conversation import Conversation
from specchat.core.types import GenerationParams


def specchat(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specchat", *args],
        capture_output=True,
        text=True,
        input=stdin,
        env={**os.environ},
        timeout=600,
    )


def test_chat_json_matches_the_engine(demo_pair, demo_runtime) -> None:
    out = specchat(
        "chat",
        "--target",
        str(demo_pair.target),
        "--draft",
        str(demo_pair.draft),
        "--max-tokens",
        "32",
        "--depth",
        "auto",
        "--json",
        "What is a bicycle?",
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert set(result) >= {"prompt_text", "tokens", "text", "finish_reason", "stats", "placement"}
    assert result["placement"] == dict(zip(("target", "draft"), demo_runtime.placement(), strict=True))
    assert set(result["stats"]) >= {
        "rounds",
        "drafted",
        "accepted",
        "acceptance_rate",
        "tokens_per_second",
        "mean_accepted_per_round",
        "wall_seconds",
    }
    assert "<|im_start|>user\nWhat is a bicycle?<|im_end|>" in result["prompt_text"]
    session = Conversation(demo_runtime)
    list(session.reply("What is a bicycle?", GenerationParams(max_tokens=32), depth=DepthControl(0)))
    assert result["tokens"] == session.last_tokens
    assert result["text"] == session.messages[-1]["content"]


def test_chat_streams_coloured_verdicts_with_a_summary(demo_pair, tmp_path: Path) -> None:
    messages = tmp_path / "conv.json"
    messages.write_text(
        json.dumps(
            [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Name a colour."},
            ]
        )
    )
    out = specchat(
        "chat", "--target", str(demo_pair.target), "--ngram", "--max-tokens", "12", "--messages", str(messages)
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
    assert "tok/s" in out.stderr and "acceptance" in out.stderr and "target on " in out.stderr


def test_bench_json_reports_both_rates_and_identity(demo_pair, tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        json.dumps({"id": "a", "messages": [{"role": "user", "content": "Say hi."}]})
        + "\n"
        + json.dumps({"id": "b", "messages": [{"role": "user", "content": "Count to five."}]})
        + "\n"
    )
    out = specchat(
        "bench",
        "--target",
        str(demo_pair.target),
        "--draft",
        str(demo_pair.draft),
        "--prompts",
        str(prompts),
        "--depth",
        "3",
        "--max-tokens",
        "16",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    for key in (
        "baseline_tokens_per_s",
        "speculative_tokens_per_s",
        "speedup",
        "acceptance_rate",
        "identical",
        "per_prompt",
        "native_tokens_per_s",
        "predicted_tokens_per_s",
    ):
        assert key in report
    assert report["identical"] is True
    assert [p["id"] for p in report["per_prompt"]] == ["a", "b"]
    assert report["baseline_tokens_per_s"] > 0 and report["speculative_tokens_per_s"] > 0


@pytest.fixture()
def bad_inputs(demo_pair, foreign_draft, truncated_gguf, tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    t, d = str(demo_pair.target), str(demo_pair.draft)
    text_file = tmp_path / "readme.gguf"
    text_file.write_text("not a model")
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    return {
        "missing file": (["--target", str(tmp_path / "nope.gguf"), "hi"], "model file not found"),
        "not gguf": (["--target", str(text_file), "hi"], "not a GGUF file"),
        "truncated": (["--target", str(truncated_gguf), "hi"], "truncated or corrupt"),
        "foreign vocab": (["--target", t, "--draft", str(foreign_draft), "hi"], "draft cannot speculate"),
        "prompt too long": (["--target", t, "--ctx", "256", "word " * 400], "context holds 256"),
        "depth 99": (["--target", t, "--draft", d, "--depth", "99", "hi"], "depth must be between 0 and 16"),
        "depth word": (["--target", t, "--draft", d, "--depth", "deep", "hi"], "depth must be a number"),
        "negative temperature": (["--target", t, "--temperature", "-1", "hi"], "temperature must be 0 or more"),
        "empty messages": (["--target", t, "--messages", str(empty)], "conversation is empty"),
        "zero max tokens": (["--target", t, "--max-tokens", "0", "hi"], "max tokens must be at least 1"),
        "gpu layers word": (["--target", t, "--n-gpu-layers", "most", "hi"], "GPU layers must be a number"),
        "top-k word": (["--target", t, "--top-k", "many", "hi"], "argument --top-k: invalid int value"),
        "no target": (["hi"], "the following arguments are required: --target"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing file",
        "not gguf",
        "truncated",
        "foreign vocab",
        "prompt too long",
        "depth 99",
        "depth word",
        "negative temperature",
        "empty messages",
        "zero max tokens",
        "gpu layers word",
        "top-k word",
        "no target",
    ],
)
def test_bad_input_gives_one_line_and_exit_2(bad_inputs, case: str) -> None:
    args, expected = bad_inputs[case]
    out = specchat("chat", *args)
    assert out.returncode == 2, (out.returncode, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("specchat: error: ") and expected in lines[0], lines[0]
    assert "Traceback" not in out.stderr


def test_depth_zero_is_plain_decoding(demo_pair) -> None:
    out = specchat(
        "chat",
        "--target",
        str(demo_pair.target),
        "--draft",
        str(demo_pair.draft),
        "--depth",
        "0",
        "--max-tokens",
        "8",
        "--json",
        "hi",
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["stats"]["drafted"] == 0


def test_info_reports_the_build() -> None:
    from specchat.core.llama import devices

    out = specchat("info")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("specchat ") and lines[1].startswith("llama-cpp-python ")
    assert lines[2].startswith("GPU offload: " + ("yes" if devices.offload_supported() else "no"))
    data = json.loads(specchat("info", "--json").stdout)
    assert data["offload"] is devices.offload_supported()
    assert [d["name"] for d in data["devices"]] == [d.name for d in devices.list_devices()]


def test_bench_takes_depths_in_turn_and_reports_each(demo_pair, tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"id": i, "messages": [{"role": "user", "content": text}]}) + "\n"
            for i, text in (("a", "Say hi."), ("b", "Name a fruit."))
        )
    )
    out = specchat(
        "bench",
        "--target",
        str(demo_pair.target),
        "--draft",
        str(demo_pair.draft),
        "--prompts",
        str(prompts),
        "--depth",
        "2",
        "auto",
        "--max-tokens",
        "8",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    runs = json.loads(out.stdout)["runs"]
    assert [r["depth"] for r in runs] == ["2", "auto"]
    for run in runs:
        assert [p["id"] for p in run["per_prompt"]] == ["a", "b"]
        assert {p["depth"] for p in run["per_prompt"]} == {run["depth"]}
        assert run["identical"] is True and run["speculative_tokens_per_s"] > 0
