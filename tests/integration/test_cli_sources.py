"""Per-source counts in ``chat --json`` and ``bench --json``; ``--draft --ngram`` together mean the composite."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import specchat

COPY = "Please repeat exactly: the quick brown fox jumps over the lazy dog, and the lazy dog sleeps on."


def test_chat_json_counts_drafts_per_source(demo_pair) -> None:
    runs = {}
    for flags in (["--draft", str(demo_pair.draft)], ["--ngram"], ["--draft", str(demo_pair.draft), "--ngram"]):
        out = specchat("chat", "--target", str(demo_pair.target), *flags, "--max-tokens", "40", "--json", COPY)
        assert out.returncode == 0, out.stderr
        runs[" ".join(f for f in flags if f.startswith("--"))] = json.loads(out.stdout)
    assert set(runs["--draft"]["by_source"]) == {"model"}
    assert set(runs["--ngram"]["by_source"]) == {"lookup"}
    composite = runs["--draft --ngram"]
    assert composite["tokens"] == runs["--draft"]["tokens"]  # greedy: the same reply whoever drafts
    for result in runs.values():
        counts, stats = result["by_source"], result["stats"]
        assert sum(c["drafted"] for c in counts.values()) == stats["drafted"] > 0
        assert sum(c["accepted"] for c in counts.values()) == stats["accepted"]
        assert all(0 <= c["accepted"] <= c["drafted"] for c in counts.values())


def test_bench_json_counts_drafts_and_rounds_per_source(demo_pair, tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "copy", "messages": [{"role": "user", "content": COPY}]}) + "\n")
    out = specchat(
        "bench",
        "--target",
        str(demo_pair.target),
        "--draft",
        str(demo_pair.draft),
        "--ngram",
        "--prompts",
        str(prompts),
        "--max-tokens",
        "32",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["identical"] is True
    (prompt,) = report["per_prompt"]
    assert report["by_source"] == prompt["by_source"] and prompt["by_source"]
    assert sum(c["drafted"] for c in prompt["by_source"].values()) > 0
    assert set(prompt["round_kinds"]) <= {"plain", "lookup", "model", "splice"}
    assert sum(prompt["round_kinds"].values()) >= 1


def test_bench_without_a_drafter_and_ngram_with_no_spec_are_one_line_errors(demo_pair, tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "a", "messages": [{"role": "user", "content": "Hi."}]}) + "\n")
    bench = specchat("bench", "--target", str(demo_pair.target), "--prompts", str(prompts))
    chat = specchat("chat", "--target", str(demo_pair.target), "--ngram", "--no-spec", "Hi.")
    for out, words in ((bench, "give a drafter"), (chat, "--no-spec")):
        assert out.returncode == 2
        assert words in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
