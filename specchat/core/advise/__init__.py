"""The draft finder: which drafter suits a target, and how fast it runs on this machine.

``candidates`` lists what could draft (library files, MTP heads, n-gram lookup,
catalog drafts to download), ``calibrate`` measures costs and acceptance with
short greedy runs, ``predict`` turns the measurements into tokens per second
at each depth, ``confirm`` checks the winner against plain decoding, ``cache``
keeps the results per file version, machine and build, and ``advisor`` runs
the lot within a time budget.
"""

DEFAULT_BUDGET = 60.0
"""Seconds the advisor spends measuring unless told otherwise: about a minute for 3-5 candidates."""
