"""`.ci/run` runs the README's own test command, read from the README, and fails when it fails.

Each case runs the real script on a small project in a temporary folder (a README, a test file, a
pyproject for ruff and mypy), in the virtual environment these tests run in (``SPECCHAT_CI_VENV``),
so nothing is installed or built.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- ci: test command -->"
FENCE = "```"


def _project(tmp_path: Path, readme: str, test_body: str) -> Path:
    (tmp_path / ".ci").mkdir()
    shutil.copy2(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    (tmp_path / "README.md").write_text(readme)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_it.py").write_text(test_body)
    (tmp_path / "pyproject.toml").write_text('[tool.mypy]\nfiles = ["tests"]\n')
    return tmp_path


def _readme(command: str) -> str:
    return f"# demo\n\nRun the tests:\n\n{MARKER}\n{FENCE}bash\n{command}\n{FENCE}\n\nMore text.\n"


def _run_ci(project: Path) -> subprocess.CompletedProcess[str]:
    if sys.prefix == sys.base_prefix:
        pytest.fail("these tests run in a virtual environment (the README's command installs into one)")
    env = {**os.environ, "SPECCHAT_CI_VENV": sys.prefix}
    return subprocess.run(
        ["bash", str(project / ".ci" / "run")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


PASSING = "def test_it() -> None:\n    assert 1 + 1 == 2\n"
FAILING = "def test_it() -> None:\n    assert 1 + 1 == 3\n"


def test_ci_passes_when_the_readme_command_passes(tmp_path: Path) -> None:
    result = _run_ci(_project(tmp_path, _readme("pytest"), PASSING))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_ci_fails_when_the_readme_command_fails(tmp_path: Path) -> None:
    result = _run_ci(_project(tmp_path, _readme("pytest"), FAILING))
    assert result.returncode != 0
    assert "1 failed" in result.stdout
    assert "the README's test command failed" in result.stderr


def test_ci_runs_the_readme_command_as_written(tmp_path: Path) -> None:
    """The block runs as it stands: a chain that fails before pytest fails CI, and pytest never runs."""
    result = _run_ci(_project(tmp_path, _readme("false && pytest"), PASSING))
    assert result.returncode != 0
    assert "1 passed" not in result.stdout


def test_ci_lints_before_the_tests(tmp_path: Path) -> None:
    """A lint finding fails CI at once: the README's command (and its tests) never run."""
    result = _run_ci(_project(tmp_path, _readme("pytest"), "import os\n" + PASSING))
    assert result.returncode != 0
    assert "F401" in result.stdout + result.stderr
    assert "running the README's test command" not in result.stdout


def test_ci_checks_the_format_before_the_tests(tmp_path: Path) -> None:
    """Code that `ruff format` would change fails CI before the tests run."""
    result = _run_ci(_project(tmp_path, _readme("pytest"), PASSING.replace("1 + 1", "1+1")))
    assert result.returncode != 0
    assert "running the README's test command" not in result.stdout


def test_ci_fails_when_pytest_collects_nothing(tmp_path: Path) -> None:
    result = _run_ci(_project(tmp_path, _readme("pytest"), "X = 1\n"))
    assert result.returncode == 1
    assert "collected no tests" in result.stderr


def test_ci_fails_without_a_marked_block(tmp_path: Path) -> None:
    result = _run_ci(_project(tmp_path, f"# demo\n\n{FENCE}bash\npytest\n{FENCE}\n", PASSING))
    assert result.returncode == 1
    assert MARKER in result.stderr


def test_the_readme_marks_its_test_command() -> None:
    """The project's README has the block CI reads: the pinned RPC build, the install, then plain `pytest`."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index(MARKER)
    assert lines[start + 1] == f"{FENCE}bash"
    command = lines[start + 2]
    assert lines[start + 3] == FENCE
    assert "-DGGML_RPC=on" in command and "llama-cpp-python==" in command
    assert command.endswith("&& pytest")
