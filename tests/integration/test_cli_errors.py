"""Hostile and broken input on the terminal: one ``specchat: error:`` line and exit 2, never a traceback;
an unexpected failure is one line naming a log file that holds the traceback, exit 1."""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

TEMPLATE_KEY = b"tokenizer.chat_template"


def specchat(*args: str | bytes, code: str | None = None) -> subprocess.CompletedProcess[str]:
    command: list[str | bytes] = [sys.executable, "-c", code] if code else [sys.executable, "-m", "specchat"]
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        errors="backslashreplace",
        stdin=subprocess.DEVNULL,
        env={**os.environ},
        timeout=300,
    )


def assert_one_line(out: subprocess.CompletedProcess[str], expected: str, code: int = 2) -> str:
    assert out.returncode == code, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr and "Warning" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert expected in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def template_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A copy of the demo draft whose chat template can be overwritten in place (same length, same offsets)."""
    from specchat.core.models.demo import demo_draft_path

    path = tmp_path_factory.mktemp("template-model") / "hostile-template.gguf"
    shutil.copyfile(demo_draft_path(), path)
    head = path.read_bytes()[:8_000_000]
    at = head.find(struct.pack("<Q", len(TEMPLATE_KEY)) + TEMPLATE_KEY)
    assert at > 0
    value_type, length = struct.unpack_from("<IQ", head, at + 8 + len(TEMPLATE_KEY))
    assert value_type == 8  # a string
    start = at + 8 + len(TEMPLATE_KEY) + 12

    def with_template(source: str) -> Path:
        raw = source.encode()
        padding = length - len(raw) - len("{##}")
        assert padding >= 0, "template longer than the original"
        with path.open("r+b") as f:
            f.seek(start)
            f.write(raw + b"{#" + b" " * padding + b"#}")
        return path

    return with_template


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    def write(name: str, data: str | bytes) -> Path:
        path = tmp_path / name
        path.write_bytes(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
        return path

    folder = tmp_path / "a-folder.gguf"
    folder.mkdir()
    os.mkfifo(tmp_path / "a-pipe.gguf")
    return {
        "folder": folder,
        "fifo": tmp_path / "a-pipe.gguf",
        "numbers": write("numbers.json", "[1, 2, 3]"),
        "surrogate": write("surrogate.json", '[{"role": "user", "content": "bad \\ud800 text"}]'),
        "nested": write("nested.json", "[" * 200_000 + "]" * 200_000),
        "no content": write("no-content.json", '[{"role": "user"}]'),
        "latin1": write("latin1.json", '[{"role": "user", "content": "café"}]'.encode("latin-1")),
        "prompts": write("prompts.jsonl", '{"id": "a", "messages": [{"role": "user", "content": "hi"}]}\n'),
        "bad prompts": write("bad.jsonl", '{"id": "a", "messages": [{"role": "user", "content": 5}]}\n'),
    }


CHAT_CASES: dict[str, tuple[Callable[[Path, dict[str, Path]], list[str | bytes]], str]] = {
    "a folder as the model": (lambda t, f: ["--target", str(f["folder"]), "hi"], "model path is not a file"),
    "a FIFO as the model": (
        lambda t, f: ["--target", str(f["fifo"]), "hi"],
        "model path is not a file but a FIFO (named pipe)",
    ),
    "/proc/self/mem as the model": (lambda t, f: ["--target", "/proc/self/mem", "hi"], "/proc/self/mem"),
    "--messages is a folder": (
        lambda t, f: ["--target", str(t), "--messages", str(f["folder"])],
        "cannot read messages file",
    ),
    "--messages is unreadable": (
        lambda t, f: ["--target", str(t), "--messages", "/proc/self/mem"],
        "cannot read messages file /proc/self/mem",
    ),
    "messages [1,2,3]": (
        lambda t, f: ["--target", str(t), "--messages", str(f["numbers"])],
        "message 1 must be an object",
    ),
    "a lone surrogate in content": (
        lambda t, f: ["--target", str(t), "--messages", str(f["surrogate"])],
        "not valid Unicode (a lone surrogate",
    ),
    "a non-UTF-8 byte in the prompt": (lambda t, f: ["--target", str(t), b"caf\xe9"], "not valid Unicode"),
    "deeply nested JSON": (lambda t, f: ["--target", str(t), "--messages", str(f["nested"])], "nested too deeply"),
    "a messages file in Latin-1": (lambda t, f: ["--target", str(t), "--messages", str(f["latin1"])], "not UTF-8 text"),
    "a message without content": (
        lambda t, f: ["--target", str(t), "--messages", str(f["no content"])],
        'message 1 (user) has no "content"',
    ),
    "--seed -1": (lambda t, f: ["--target", str(t), "--seed", "-1", "hi"], "seed must be between 0 and 4294967295"),
    "--seed 2**40": (lambda t, f: ["--target", str(t), "--seed", str(2**40), "hi"], "seed must be between"),
    "--temperature inf": (
        lambda t, f: ["--target", str(t), "--temperature", "inf", "hi"],
        "temperature must be a finite number",
    ),
    "--temperature nan": (
        lambda t, f: ["--target", str(t), "--temperature", "nan", "hi"],
        "temperature must be a finite number",
    ),
    "--temperature 50": (
        lambda t, f: ["--target", str(t), "--temperature", "50", "hi"],
        "temperature must be between 0 and 5",
    ),
    "--threads -3": (lambda t, f: ["--target", str(t), "--threads", "-3", "hi"], "threads must be between 1 and"),
    "--threads 1000": (
        lambda t, f: ["--target", str(t), "--threads", "1000", "hi"],
        f"threads must be between 1 and {os.cpu_count()} (this machine's CPUs), got 1000",
    ),
    "--top-k 10**9": (lambda t, f: ["--target", str(t), "--top-k", str(10**9), "hi"], "top-k must be between"),
    "--repeat-penalty inf": (
        lambda t, f: ["--target", str(t), "--repeat-penalty", "inf", "hi"],
        "repeat penalty must be a finite number",
    ),
    "--ctx 10**9": (lambda t, f: ["--target", str(t), "--ctx", str(10**9), "hi"], "context size must be between"),
    "--max-tokens 10**12": (
        lambda t, f: ["--target", str(t), "--max-tokens", str(10**12), "hi"],
        "max tokens must be between",
    ),
}


@pytest.mark.parametrize("case", sorted(CHAT_CASES))
def test_chat_bad_input_is_one_line_and_exit_2(demo_pair, files: dict[str, Path], case: str) -> None:
    make_args, expected = CHAT_CASES[case]
    line = assert_one_line(specchat("chat", *make_args(demo_pair.target, files)), expected)
    assert line.startswith("specchat: error: ")
    if case == "a message without content":
        assert "empty" not in line


HOSTILE_TEMPLATES = {
    "1/0": ("{{ 1/0 }}", "ZeroDivisionError: division by zero"),
    "range(10**9)": ("{% for i in range(10**9) %}{% endfor %}", "over its budget"),
    "nested range(99999) loops": (
        "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
        "looped more than",
    ),
    "a recursive macro": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nested calls more than"),
    "renders nothing": ("{% if false %}x{% endif %}", "rendered an empty prompt"),
    "does not compile": ("{% for m in messages %}", "does not compile"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TEMPLATES))
def test_a_hostile_chat_template_is_one_line_and_exit_2(template_model, case: str) -> None:
    source, expected = HOSTILE_TEMPLATES[case]
    model = template_model(source)
    out = specchat("chat", "--target", str(model), "--no-spec", "--max-tokens", "4", "hi")
    assert_one_line(out, expected)


def test_the_patched_template_model_still_chats_with_a_good_template(template_model) -> None:
    from specchat.core.runtime.template import CHATML_TEMPLATE

    model = template_model(CHATML_TEMPLATE)
    out = specchat("chat", "--target", str(model), "--no-spec", "--max-tokens", "4", "--json", "hi")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["prompt_text"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_a_prompt_far_over_the_context_is_refused_before_it_is_tokenized(demo_pair, tmp_path: Path) -> None:
    """40 MB of text cannot fit 4096 tokens whatever the tokenizer does: one line, without tokenizing it
    (which took 15 s and 2 GB for 10 MB)."""
    messages = tmp_path / "huge.json"
    messages.write_text(json.dumps([{"role": "user", "content": "word " * 8_000_000}]), encoding="utf-8")
    out = specchat("chat", "--target", str(demo_pair.target), "--no-spec", "--messages", str(messages))
    assert_one_line(out, "the conversation is at least ")
    assert "tokens but the context holds 4096" in out.stderr


TOKENIZE_LONG = """
import sys
from specchat.core.llama.model import Model
model = Model(sys.argv[1], vocab_only=True)
text = "word " * 8_000_000
try:
    print("tokenizing", flush=True)
    model.tokenize(text)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def test_ctrl_c_interrupts_tokenizing_a_long_text(demo_pair) -> None:
    """A long text is tokenized on a helper thread: the caller's wait, and so Ctrl-C, is not stuck in llama.cpp."""
    with subprocess.Popen(
        [sys.executable, "-c", TOKENIZE_LONG, str(demo_pair.target)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == "tokenizing\n"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130  # tokenizing the whole text takes over a minute here
        assert proc.stdout.read() == "interrupted\n"


def test_bench_bad_input_is_one_line_and_exit_2(demo_pair, files: dict[str, Path]) -> None:
    t, d = str(demo_pair.target), str(demo_pair.draft)
    assert_one_line(
        specchat("bench", "--target", t, "--draft", d, "--prompts", str(files["bad prompts"])),
        "bad.jsonl:1: message 1 (user) has content 5",
    )
    assert_one_line(
        specchat("bench", "--target", t, "--draft", d, "--prompts", str(files["prompts"]), "--seed", "-1"),
        "seed must be between",
    )
    assert_one_line(
        specchat("bench", "--target", t, "--draft", d, "--prompts", str(files["folder"])), "prompts file not found"
    )


def test_models_check_bad_input_is_one_line_and_exit_2(demo_pair, files: dict[str, Path]) -> None:
    t, d = str(demo_pair.target), str(demo_pair.draft)
    assert_one_line(specchat("models", "check", t, d, "--n-ctx", "-5"), "context size must be between")
    assert_one_line(specchat("models", "check", str(files["folder"]), d), "could not verify the pair")
    assert_one_line(specchat("models", "check", t, "/proc/self/mem"), "could not verify the pair")


CRASH = (
    "import sys, specchat.cli.info as info; info.cmd_info = lambda args: 1 / 0; "
    "from specchat.__main__ import main; sys.exit(main(sys.argv[1:]))"
)


def test_an_unexpected_failure_is_one_line_with_a_log_holding_the_traceback(app_dirs: dict[str, Path]) -> None:
    out = specchat("info", code=CRASH)
    line = assert_one_line(out, "specchat: internal error: ZeroDivisionError: division by zero", code=1)
    log = app_dirs["cache"] / "crash.log"
    assert f"the details are in {log}" in line
    text = log.read_text(encoding="utf-8")
    assert "Traceback" in text and "ZeroDivisionError" in text and "<lambda>" in text


def test_the_crash_log_falls_back_to_the_temp_dir(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the cache dir should be")
    temp = tmp_path / "tmp"
    temp.mkdir()
    env_code = CRASH.replace(
        "import sys,",
        f"import os; os.environ['SPECCHAT_CACHE_DIR'] = {str(blocked / 'cache')!r};"
        f" os.environ['TMPDIR'] = {str(temp)!r}; import sys,",
    )
    out = specchat("info", code=env_code)
    assert_one_line(out, f"the details are in {temp / 'specchat-crash.log'}", code=1)
    assert "ZeroDivisionError" in (temp / "specchat-crash.log").read_text(encoding="utf-8")
