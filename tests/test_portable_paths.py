"""No source, benchmark or test holds a path of one machine: shared files are found relative to the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A string literal that starts with a home or workspace folder of some machine.
MACHINE_PATH = re.compile(r"""["'](/work/|/home/|/root/|/Users/|[A-Za-z]:\\\\)""")


def _python_files() -> list[Path]:
    return sorted(p for folder in ("specchat", "benchmarks", "tests") for p in (ROOT / folder).rglob("*.py"))


def test_no_python_file_holds_a_machine_path() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _python_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if MACHINE_PATH.search(line) and path.name != Path(__file__).name
    ]
    assert found == []


def test_the_pattern_finds_a_machine_path() -> None:
    assert MACHINE_PATH.search('PROMPTS = Path("/work/shared/prompts/mixed-public.jsonl")')
    assert MACHINE_PATH.search("p = 'C:\\\\Users\\\\me\\\\x.gguf'")
    assert not MACHINE_PATH.search('PROMPTS = ROOT.parent / "shared" / "prompts"')
