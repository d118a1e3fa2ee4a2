"""``specchat chat`` and ``bench`` with ``--attach FILE`` and ``--prediction FILE``, run as a user runs them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specchat.cli.sources import MAX_FILE_BYTES, document_block
from support.cli import specchat

CODE = (
    "def area(width, height):\n    return width * height\n\n\n"
    "def perimeter(width, height):\n    return 2 * (width + height)\n"
)
ASK = "Repeat this code exactly, in a code block."


def test_chat_drafts_from_a_prediction_and_an_attachment_and_the_reply_is_plain_decoding_s(
    demo_pair, tmp_path: Path
) -> None:
    code = tmp_path / "shapes.py"
    code.write_text(CODE)
    model = ["--target", str(demo_pair.target), "--draft", str(demo_pair.draft), "--ngram", "--max-tokens", "60"]
    first = specchat(
        "chat",
        "--target",
        str(demo_pair.target),
        "--no-spec",
        "--max-tokens",
        "60",
        "--json",
        "--attach",
        str(code),
        ASK,
    )
    assert first.returncode == 0, first.stderr
    base = json.loads(first.stdout)
    assert document_block("shapes.py", CODE) in base["prompt_text"] and ASK in base["prompt_text"]
    prediction = tmp_path / "expected.txt"
    prediction.write_text(base["text"])
    out = specchat("chat", *model, "--json", "--attach", str(code), "--prediction", str(prediction), ASK)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["tokens"] == base["tokens"]  # greedy: the same reply as plain decoding
    texts = result["by_text"]
    assert texts["the prediction"]["accepted"] > 0, texts
    assert set(texts) <= {"the prediction", "shapes.py"}
    shown = specchat(
        "chat", *model, "--attach", str(code), "--prediction", str(prediction), ASK
    )  # as a person reads it
    assert shown.returncode == 0, shown.stderr
    assert "drafted from the prediction:" in shown.stderr


def test_bench_takes_a_prediction_and_attachments(demo_pair, tmp_path: Path) -> None:
    code = tmp_path / "shapes.py"
    code.write_text(CODE)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "copy", "messages": [{"role": "user", "content": ASK}]}) + "\n")
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
        "48",
        "--attach",
        str(code),
        "--prediction",
        str(code),
        "--json",
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["identical"] is True
    (prompt,) = report["per_prompt"]
    assert prompt["by_text"]["the prediction"]["accepted"] > 0, prompt


def bad(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / kind
    if kind == "binary":
        path.write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    elif kind == "directory":
        path.mkdir()
    elif kind == "huge":
        with path.open("wb") as f:
            f.truncate(MAX_FILE_BYTES + 1)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "latin1":
        path.write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    return path


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("missing", "not found"),
        ("binary", "binary file"),
        ("directory", "directory"),
        ("huge", "at most 16 MiB"),
        ("fifo", "not a regular file"),
        ("zero", "not a regular file"),
        ("latin1", "not UTF-8"),
    ],
)
@pytest.mark.parametrize("flag", ["--attach", "--prediction"])
def test_a_bad_file_is_one_line_and_exit_2(tmp_path: Path, kind: str, words: str, flag: str) -> None:
    path = bad(tmp_path, kind)
    for command in (["chat", "hello"], ["bench", "--ngram", "--prompts", str(tmp_path / "p.jsonl")]):
        if command[0] == "bench":
            (tmp_path / "p.jsonl").write_text('{"id": "a", "messages": [{"role": "user", "content": "hi"}]}\n')
        out = specchat(*command, "--target", str(tmp_path / "no-model.gguf"), flag, str(path))
        assert out.returncode == 2, (command, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("specchat: error: ") and words in lines[0], out.stderr
        assert "Traceback" not in out.stderr
