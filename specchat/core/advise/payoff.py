"""Can speculation pay on this backend at all? Decided from the verify cost by batch size alone.

Speculation trades one target pass per token for one batched pass per round. It
pays only when a batch of n tokens costs much less than n single passes: on a
bandwidth-bound GPU an 8-token batch costs about 2-3 one-token passes; on some
Metal machines it costs 6.5 (published llama.cpp figures), and then no drafter
can win. The rule takes the most any drafter could give: one accepted with
probability :data:`REFERENCE_ACCEPTANCE` per token (a good head: EAGLE-3 on
Llama 3.1 8B publishes a mean accepted length of about 3.5, which this
acceptance gives at depth 5) that costs nothing to run, at its best depth::

    ceiling = max over k of (1 - a**(k+1)) / (1 - a) / (verify(k+1) / verify(1))

Below :data:`CANNOT_PAY` the real drafter, which does cost something, loses to
plain decoding; below :data:`LITTLE_ROOM` it can win only a little. The
verify costs are the calibration's (the draft finder's rounds: every batch size
from 1 to its depth + 1), as means per size; a size not measured is read off a
line through the measured sizes of two or more.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specchat.core import paths
from specchat.core.advise.calibrate import RoundSample
from specchat.core.engine.costs import RoundCosts
from specchat.core.jsonfile import UnreadableFileError, read_json

log = logging.getLogger(__name__)

REFERENCE_ACCEPTANCE = 0.8
CANNOT_PAY = 1.1  # the ideal drafter's best speed-up below which a real one loses
LITTLE_ROOM = 1.3  # below this, only an excellent and cheap drafter gains a little
REFERENCE_BATCH = 8  # the batch size the ratio is quoted at (published comparisons use 8 rows)
MAX_DEPTH = 16
STORE_FILENAME = "backend-payoff.json"
STORE_VERSION = 1


class Outlook(str, enum.Enum):
    PAYS = "pays"
    LITTLE = "little"
    CANNOT = "cannot"


@dataclass(frozen=True)
class VerifyScaling:
    """The target's verify seconds: one token alone, and the mean for each batch size measured."""

    single: float
    batches: Mapping[int, float]  # batch size (>= 2) -> mean seconds

    def ratio(self, n: int) -> float:
        """verify(n) / verify(1), at least 1: the measured mean at ``n``, else the line through the batches."""
        if n <= 1:
            return 1.0
        seconds = self.batches.get(n)
        if seconds is None:
            sizes = sorted(self.batches)
            if len(sizes) == 1:  # a line through the one-token pass and the one batch measured
                m = sizes[0]
                seconds = self.single + (self.batches[m] - self.single) * (n - 1) / (m - 1)
            else:
                mean_n = statistics.fmean(sizes)
                mean_t = statistics.fmean(self.batches[s] for s in sizes)
                var = sum((s - mean_n) ** 2 for s in sizes)
                slope = sum((s - mean_n) * (self.batches[s] - mean_t) for s in sizes) / var
                seconds = mean_t + slope * (n - mean_n)
        return max(seconds / self.single, 1.0)


def verify_scaling(rounds: Sequence[RoundSample]) -> VerifyScaling | None:
    """The scaling the rounds measured, read off the one round-cost model (:class:`RoundCosts`, floored and
    monotone) that auto depth and the finder use; None without both a one-token pass and a batch of two or more."""
    sizes = {r.drafted + 1 for r in rounds if r.verify > 0}
    if 1 not in sizes or len(sizes) < 2:
        return None
    # verify_cost, not verify_costs: the latter caps each extra token at a share of a pass (noise control
    # for the composite), which would hide exactly the backends this rule is for
    costs = RoundCosts.fitted(r for r in rounds if r.verify > 0)
    return VerifyScaling(costs.verify_cost(1), {n: costs.verify_cost(n) for n in sorted(sizes) if n > 1})


@dataclass(frozen=True)
class Payoff:
    """What the verify cost allows: the ideal drafter's best speed-up, at which depth, and the batch ratio."""

    outlook: Outlook
    ceiling: float
    best_depth: int
    batch_ratio: float  # verify(REFERENCE_BATCH) / verify(1)

    @property
    def pays(self) -> bool:
        return self.outlook is not Outlook.CANNOT

    def line(self) -> str:
        """One sentence with the measured ratio, for the finder's status and the picker."""
        share = self.batch_ratio / REFERENCE_BATCH
        batch = (
            f"a batch of {REFERENCE_BATCH} tokens costs {self.batch_ratio:.1f}x one token here "
            f"({share:.0%} of decoding them one by one)"
        )
        ideal = f"a free drafter accepted {REFERENCE_ACCEPTANCE:.0%} of the time would gain at most {self.ceiling:.2f}x"
        if self.outlook is Outlook.CANNOT:
            return f"Speculation cannot pay on this backend: {batch}, so even {ideal}."
        if self.outlook is Outlook.LITTLE:
            return f"Speculation can pay only a little on this backend: {batch}; {ideal}."
        return f"Speculation can pay on this backend: {batch}; {ideal} (depth {self.best_depth})."

    def to_json(self) -> dict[str, object]:
        return {
            "outlook": self.outlook.value,
            "ceiling": round(self.ceiling, 3),
            "best_depth": self.best_depth,
            "batch_ratio": round(self.batch_ratio, 3),
            "text": self.line(),
        }

    @classmethod
    def from_json(cls, raw: object) -> Payoff | None:
        if not isinstance(raw, dict):
            return None
        try:
            return cls(
                Outlook(raw["outlook"]), float(raw["ceiling"]), int(raw["best_depth"]), float(raw["batch_ratio"])
            )
        except (KeyError, TypeError, ValueError):
            return None


def payoff(scaling: VerifyScaling, acceptance: float = REFERENCE_ACCEPTANCE, max_depth: int = MAX_DEPTH) -> Payoff:
    """The rule in the module docstring, as a pure function of the verify costs."""
    a = acceptance

    def tokens(k: int) -> float:
        return float(k + 1) if a >= 1.0 else (1 - a ** (k + 1)) / (1 - a)

    gains = {k: tokens(k) / scaling.ratio(k + 1) for k in range(1, max_depth + 1)}
    best = max(gains, key=lambda k: gains[k])
    ceiling = gains[best]
    outlook = Outlook.CANNOT if ceiling < CANNOT_PAY else Outlook.LITTLE if ceiling < LITTLE_ROOM else Outlook.PAYS
    return Payoff(outlook, ceiling, best, scaling.ratio(REFERENCE_BATCH))


def store_path() -> Path:
    return paths.data_dir() / STORE_FILENAME


def _key(target: str | Path) -> str | None:
    from specchat.core.advise.cache import result_key

    return result_key(target, "verify-scaling", None)  # the target file, this machine and build


def _entries(path: Path) -> dict[str, object]:
    try:
        data = read_json(path)
    except (FileNotFoundError, UnreadableFileError):
        return {}
    if not isinstance(data, dict) or data.get("version") != STORE_VERSION or not isinstance(data.get("targets"), dict):
        return {}
    entries: dict[str, object] = data["targets"]
    return entries


def remember(target: str | Path, result: Payoff, path: Path | None = None) -> None:
    """Keep ``result`` for this target file on this machine and build (the picker shows it)."""
    path = path or store_path()
    key = _key(target)
    if key is None:
        return
    entries = _entries(path)
    entries[key] = {**result.to_json(), "ceiling": result.ceiling, "batch_ratio": result.batch_ratio}  # unrounded
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"version": STORE_VERSION, "targets": entries}, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def known(target: str | Path, path: Path | None = None) -> Payoff | None:
    """What the last calibration of this target here found, if the file is unchanged since."""
    entries = _entries(path or store_path())
    if not entries:
        return None
    key = _key(target)
    return Payoff.from_json(entries.get(key)) if key is not None else None
