"""Draft/target compatibility verdicts from GGUF metadata."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from specchat.core.models.compat import Verdict, check_pair

QWENISH = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [f"Ġqw{i}" for i in range(29)]


def test_identical_vocabularies_are_compatible(make_gguf) -> None:
    target = make_gguf("t.gguf", tensor_elements=4096)
    draft = make_gguf("d.gguf", tensor_elements=64)
    report = check_pair(target, draft)
    assert report.verdict is Verdict.COMPATIBLE and report.reasons == []
    assert report.summary().startswith("compatible: draft is ")


def test_padded_tail_is_only_a_warning(make_gguf) -> None:
    base = make_gguf.base_vocab
    target = make_gguf("t.gguf", tokens=base + [f"[PAD{i}]" for i in range(200)], tensor_elements=8192)
    draft = make_gguf("d.gguf")
    report = check_pair(target, draft)
    assert report.verdict is Verdict.WARNINGS
    assert report.problems == []
    assert any("200 extra padding/unused tokens" in r for r in report.reasons)


def test_a_few_real_extra_tokens_warn_many_fail(make_gguf) -> None:
    base = make_gguf.base_vocab
    draft = make_gguf("d.gguf")
    few = check_pair(make_gguf("t1.gguf", tokens=base + ["hello", "world"], tensor_elements=8192), draft)
    assert few.verdict is Verdict.WARNINGS and "2 real" in few.summary()
    many = check_pair(make_gguf("t2.gguf", tokens=base + [f"w{i}" for i in range(300)], tensor_elements=8192), draft)
    assert many.verdict is Verdict.INCOMPATIBLE and "vocabulary sizes differ too much" in many.problems[0]


def test_foreign_vocabulary_is_incompatible_and_names_the_difference(make_gguf) -> None:
    draft = make_gguf("smol.gguf")
    same_type = check_pair(make_gguf("q.gguf", tokens=QWENISH, tensor_elements=8192), draft)
    assert same_type.verdict is Verdict.INCOMPATIBLE
    assert "different vocabularies: 27 of the 32 shared token ids" in same_type.problems[0]
    assert "'Ġqw2'" in same_type.problems[0] and "'tok2'" in same_type.problems[0]
    spm = check_pair(make_gguf("spm.gguf", tokenizer_model="llama", tensor_elements=8192), draft)
    assert spm.verdict is Verdict.INCOMPATIBLE
    assert spm.summary().startswith("incompatible: different tokenizers: the target uses 'llama', the draft 'gpt2'")


def test_special_ids_size_context_and_family_warnings(make_gguf) -> None:
    target = make_gguf("t.gguf", context_length=32768, tensor_elements=1024, add_bos=True, eos=0)
    draft = make_gguf("d.gguf", context_length=2048, tensor_elements=1024, arch="qwen2", basename="Other")
    report = check_pair(target, draft, n_ctx=8192)
    assert report.verdict is Verdict.WARNINGS
    text = " | ".join(report.warnings)
    for expected in (
        "EOS token ids differ (target 0, draft 2)",
        "the target adds a BOS token",
        "not much smaller than the target",
        "the draft's context is 2048 tokens, shorter than the 8192",
        "different families: target architecture 'llama', draft 'qwen2'",
    ):
        assert expected in text
    assert "target's context" not in text
    assert check_pair(target, draft).verdict is Verdict.WARNINGS  # still warns without n_ctx


def test_demo_pair_is_compatible(demo_pair) -> None:
    report = check_pair(demo_pair.target, demo_pair.draft, n_ctx=4096)
    assert report.verdict is Verdict.COMPATIBLE, report.reasons
    assert report.target is not None and report.draft is not None
    assert report.target.vocab_fingerprint == report.draft.vocab_fingerprint
    assert (report.target.quant, report.draft.quant) == ("F32", "Q4_1")
    assert report.target.file_size > 4 * report.draft.file_size
    assert "draft is" in report.notes[0]


def test_cli_check_exit_codes(make_gguf, demo_pair) -> None:
    good_t, good_d = make_gguf("t.gguf", tensor_elements=4096), make_gguf("d.gguf")
    bad = make_gguf("q.gguf", tokens=QWENISH)

    def run(*a: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "specchat", "models", "check", *map(str, a)],
            capture_output=True,
            text=True,
            env={**os.environ},
        )

    ok = run(good_t, good_d, "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["verdict"] == "compatible"
    # These tiny files carry no layer shape, so whether they fit cannot be told (and is not an error).
    assert json.loads(ok.stdout)["memory"]["ok"] is None
    assert json.loads(ok.stdout)["memory"]["text"].startswith("cannot tell: ")
    demo = run(demo_pair.target, demo_pair.draft)
    assert demo.returncode == 0 and "\n  memory: " in demo.stdout and "the pair needs about" in demo.stdout
    no = run(bad, good_d)
    assert no.returncode == 1 and no.stdout.startswith("incompatible: different vocabularies")
    missing = run(good_t, make_gguf.root / "absent.gguf")
    assert missing.returncode == 2 and "GGUF file not found" in missing.stderr
