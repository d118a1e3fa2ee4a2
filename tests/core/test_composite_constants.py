"""The composite's constants have one source: the docs' table is generated from the code."""

from __future__ import annotations

from pathlib import Path

from specchat.core.engine.composite import tuning

DOCS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


def test_every_constant_is_described_once() -> None:
    declared = {name for name in vars(tuning) if name.isupper() and not name.startswith("_")} - {"CONSTANTS"}
    described = [name for c in tuning.CONSTANTS if c.module == tuning.__name__ for name in c.names]
    assert sorted(described) == sorted(declared)


def test_the_docs_table_is_the_codes_output() -> None:
    table = tuning.markdown_table()
    assert table in DOCS.read_text(encoding="utf-8"), "run python benchmarks/composite_constants.py"
    assert "| `MIN_READ` | 16 |" in table and "| `MATCH_KEYS` | 1-6, 8, 12, 16, 24, 32 |" in table
