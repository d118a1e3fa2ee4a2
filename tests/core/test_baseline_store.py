"""Saved plain-decoding baselines stay bounded: the newest are kept, the one just measured always."""

from __future__ import annotations

from specchat.core.chat.baseline import MAX_BASELINES, Baseline, remember
from specchat.core.settings import Settings, load_settings, save_settings


def measured(key: str, at: float) -> Baseline:
    return Baseline(key, 20.0, 48, at)


def test_the_newest_are_kept_up_to_the_limit_and_a_remeasure_replaces_its_entry() -> None:
    saved: dict[str, object] = {}
    for i in range(MAX_BASELINES + 10):
        saved = remember(saved, measured(f"pair{i}", float(i)))
    assert len(saved) == MAX_BASELINES
    assert "pair0" not in saved and f"pair{MAX_BASELINES + 9}" in saved
    assert min(float(v["measured_at"]) for v in saved.values()) == 10.0  # type: ignore[index]
    again = remember(saved, measured("pair20", 1000.0))
    assert len(again) == MAX_BASELINES and again["pair20"]["measured_at"] == 1000.0


def test_the_one_just_measured_is_kept_even_when_it_is_older_than_the_rest() -> None:
    saved = {f"k{i}": measured(f"k{i}", 100.0 + i).to_json() for i in range(MAX_BASELINES)}
    saved = remember(saved, measured("clock-went-back", 1.0))
    assert "clock-went-back" in saved and len(saved) == MAX_BASELINES


def test_broken_entries_are_dropped_and_the_settings_file_round_trips(app_dirs) -> None:
    saved = remember({"bad": {"key": "bad"}, "old": measured("old", 1.0).to_json()}, measured("new", 2.0))
    assert set(saved) == {"old", "new"}
    settings = Settings(baselines=saved)
    save_settings(settings)
    assert load_settings().baselines == saved
