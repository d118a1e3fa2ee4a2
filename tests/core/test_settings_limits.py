"""Numbers from the terminal or the settings file are finite and in range, or refused in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from specchat.core.settings import FLAG_LIMITS, Settings, load_settings
from specchat.core.types import SpecchatError


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("temperature", math.inf, "temperature must be a finite number, got inf"),
        ("temperature", math.nan, "temperature must be a finite number, got nan"),
        ("temperature", 5.5, "temperature must be between 0 and 5, got 5.5"),
        ("threads", -3, "threads must be between 1 and 1024, got -3"),
        ("seed", -1, "seed must be between 0 and 4294967295, got -1"),
        ("seed", 2**32, "seed must be between 0 and 4294967295"),
        ("top_k", 10**9, "top-k must be between 0 and 100000"),
        ("top_k", 2.5, "top-k must be a whole number"),
        ("repeat_penalty", -math.inf, "repeat penalty must be a finite number"),
    ],
)
def test_out_of_range_flags_are_refused_in_one_line(name: str, value: float, expected: str) -> None:
    with pytest.raises(SpecchatError) as info:
        FLAG_LIMITS[name].check(value)
    assert expected in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [("temperature", 0.0), ("temperature", 5), ("seed", 0), ("seed", 2**32 - 1), ("threads", 1), ("top_p", 1.0)],
)
def test_edge_values_are_accepted(name: str, value: float) -> None:
    assert FLAG_LIMITS[name].check(value) == value


def test_a_settings_file_with_infinite_or_nan_numbers_falls_back_to_defaults(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    # Python's json writes and reads these non-standard literals
    path.write_text(
        json.dumps(
            {
                "temperature": math.inf,
                "top_p": math.nan,
                "top_k": -math.inf,
                "max_tokens": 1e300,
                "n_ctx": math.inf,
                "repeat_penalty": 1.2,
            }
        )
    )
    settings = load_settings(path)
    defaults = Settings()
    assert (settings.temperature, settings.top_p, settings.top_k, settings.max_tokens, settings.n_ctx) == (
        defaults.temperature,
        defaults.top_p,
        defaults.top_k,
        defaults.max_tokens,
        defaults.n_ctx,
    )
    assert settings.repeat_penalty == 1.2
