"""Sampler presets: named temperature, top-k, top-p and repeat penalty, built in or saved by the user.

A conversation keeps the sampler it was last used with (``ConversationStore.set_sampler``), as the
dictionary :meth:`SamplerPreset.as_dict` writes; :func:`preset_of` reads one back and gives None for anything
that is not a valid preset (a bad row never reaches the controls).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

CUSTOM = "Custom"  # the name shown when the values match no preset


@dataclass(frozen=True)
class SamplerPreset:
    """A sampler setting under a name (the name is ``CUSTOM`` when it is no preset's)."""

    name: str
    temperature: float
    top_k: int
    top_p: float
    repeat_penalty: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def same_values(self, other: SamplerPreset) -> bool:
        return self.top_k == other.top_k and all(
            math.isclose(a, b, abs_tol=1e-6)
            for a, b in (
                (self.temperature, other.temperature),
                (self.top_p, other.top_p),
                (self.repeat_penalty, other.repeat_penalty),
            )
        )

    def named(self, name: str) -> SamplerPreset:
        return replace(self, name=name)


BUILT_IN: tuple[SamplerPreset, ...] = (
    SamplerPreset("Precise", 0.0, 40, 0.95, 1.1),  # greedy: the same reply every time, races possible
    SamplerPreset("Balanced", 0.7, 40, 0.9, 1.1),
    SamplerPreset("Creative", 1.0, 0, 0.95, 1.05),
)

# What a preset may hold: the window's controls' ranges (temperature 0-2, top-p above 0, penalty 1-2).
_RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_k": (0, 1000),
    "top_p": (0.01, 1.0),
    "repeat_penalty": (1.0, 2.0),
}


def preset_of(data: object) -> SamplerPreset | None:
    """``data`` (a stored dictionary) as a preset; None if a value is missing, of the wrong type or out of range."""
    if not isinstance(data, dict):
        return None
    name = data.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 80:
        return None
    values: dict[str, Any] = {}
    for key, (low, high) in _RANGES.items():
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            return None
        if key == "top_k":
            if not float(value).is_integer():
                return None
            value = int(value)
        values[key] = value if key == "top_k" else float(value)
    return SamplerPreset(name.strip(), **values)


def user_presets(data: object) -> list[SamplerPreset]:
    """The user's saved presets (``Settings.presets``): the valid ones, built-in names left out."""
    if not isinstance(data, dict):
        return []
    taken = {p.name for p in BUILT_IN} | {CUSTOM}
    found = (preset_of({**v, "name": k}) if isinstance(v, dict) else None for k, v in data.items())
    return [p for p in found if p is not None and p.name not in taken]
