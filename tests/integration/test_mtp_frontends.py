"""The model's own MTP heads as a drafter in the terminal (--mtp) and in the window's Drafter list."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from specchat.core.runtime.runtime import Runtime
from specchat.core.types import SamplerParams
from support.cli import specchat as run_specchat
from support.identity import assert_same_or_tie

MODELS = Path(__file__).resolve().parents[1] / "models"
MTP_MODEL = MODELS / "qwen35-mtp.gguf"
PLAIN_MODEL = MODELS / "qwen35.gguf"
PROMPT = "Name a fruit."


def specchat(*args: str) -> subprocess.CompletedProcess[str]:
    return run_specchat(*args, timeout=300)


def chat_json(*flags: str) -> dict[str, Any]:
    out = specchat(
        "chat",
        "--target",
        str(MTP_MODEL),
        "--max-tokens",
        "40",
        "--repeat-penalty",
        "1.3",
        "--threads",
        "1",
        "--json",
        *flags,
        PROMPT,
    )
    assert out.returncode == 0, out.stderr
    reply: dict[str, Any] = json.loads(out.stdout)
    return reply


def test_chat_mtp_drafts_with_the_heads_and_matches_plain_decoding() -> None:
    plain = chat_json("--no-spec")
    mtp = chat_json("--mtp", "--depth", "3", "--draft-p-min", "0")  # no gate: random heads draft what they guess
    assert mtp["stats"]["drafted"] > 0 and mtp["stats"]["rounds"] > 0
    gated = chat_json("--mtp", "--depth", "3")  # the heads' default cutoff, 0.75: random heads are never that sure
    assert gated["stats"]["drafted"] == 0 and gated["tokens"] == plain["tokens"]
    runtime = Runtime.load(MTP_MODEL, n_ctx=256, n_threads=1)
    try:
        prompt = runtime.prompt([{"role": "user", "content": PROMPT}]).tokens
        assert_same_or_tie(
            runtime.target_context,
            prompt,
            plain["tokens"],
            mtp["tokens"],
            SamplerParams(repeat_penalty=1.3),
            "chat --mtp",
        )
    finally:
        runtime.close()


def test_chat_mtp_without_heads_is_one_line() -> None:
    out = specchat("chat", "--target", str(PLAIN_MODEL), "--mtp", "--max-tokens", "4", PROMPT)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "no MTP heads" in out.stderr and "Traceback" not in out.stderr
    both = specchat("chat", "--target", str(MTP_MODEL), "--mtp", "--draft", str(PLAIN_MODEL), PROMPT)
    assert both.returncode == 2 and both.stderr.count("\n") == 1 and "not allowed with" in both.stderr
    composite = specchat("chat", "--target", str(PLAIN_MODEL), "--mtp", "--ngram", "--max-tokens", "4", PROMPT)
    assert composite.returncode == 2 and composite.stderr.count("\n") == 1 and "MTP heads" in composite.stderr
