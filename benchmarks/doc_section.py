"""Replace one generated section of docs/benchmarks.md, between its begin and end markers, leaving the rest."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def replace_section(name: str, body: str, doc: Path = DOC) -> None:
    """Put ``body`` between ``<!-- name: begin -->`` and ``<!-- name: end -->`` in ``doc``."""
    begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
    text = doc.read_text()
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{doc}: no '{begin}' ... '{end}' markers")
    doc.write_text(pattern.sub(lambda _: f"{begin}\n{body.strip()}\n{end}", text, count=1))
