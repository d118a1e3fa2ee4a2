"""Print the composite's constants as the Markdown table in docs/benchmarks.md ("The composite's constants").

The table is generated from the code (``specchat.core.engine.composite.tuning.CONSTANTS``), so the docs'
copy cannot drift from the values the drafter runs with:

    python benchmarks/composite_constants.py
"""

from __future__ import annotations

import sys

from specchat.core.engine.composite.tuning import markdown_table


def main() -> int:
    print(markdown_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
