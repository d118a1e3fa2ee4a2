"""Settings: JSON round trip, and odd values falling back to defaults field by field."""

from __future__ import annotations

import json
import logging

import pytest

from specchat.core import paths
from specchat.core.settings import Settings, load_settings, save_settings, settings_path
from specchat.core.types import DrafterKind


def test_defaults_when_missing() -> None:
    assert load_settings() == Settings()


def test_round_trip() -> None:
    s = Settings(
        last_target="/m/t.gguf",
        last_draft="/m/d.gguf",
        temperature=0.7,
        top_k=20,
        top_p=0.8,
        repeat_penalty=1.3,
        max_tokens=64,
        depth=6,
        drafter=DrafterKind.NGRAM,
        hide_rejected=True,
        theme="dark",
        baselines={"t|d": {"key": "t|d", "tokens_per_second": 12.5, "tokens": 48, "measured_at": 1.0}},
    )
    save_settings(s)
    assert settings_path() == paths.config_dir() / "settings.json"
    assert load_settings() == s
    s.depth = None
    save_settings(s)
    assert load_settings().depth is None


def test_bad_json_gives_defaults_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    settings_path().write_text("{not json", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert load_settings() == Settings()
    assert "unreadable" in caplog.text


def test_bad_values_fall_back_field_by_field(caplog: pytest.LogCaptureFixture) -> None:
    settings_path().write_text(
        json.dumps(
            {
                "temperature": -3,
                "top_k": "many",
                "top_p": 0.5,
                "max_tokens": 0,
                "depth": 99,
                "drafter": "psychic",
                "hide_rejected": "yes",
                "theme": "dark",
                "last_target": 5,
                "baselines": [],
                "mystery": 1,
            }
        ),
        encoding="utf-8",
    )
    with caplog.at_level(logging.WARNING):
        s = load_settings()
    d = Settings()
    assert (s.temperature, s.top_k, s.max_tokens, s.depth, s.drafter) == (
        d.temperature,
        d.top_k,
        d.max_tokens,
        d.depth,
        d.drafter,
    )
    assert s.hide_rejected is False and s.last_target == "" and s.baselines == {}
    assert s.top_p == 0.5 and s.theme == "dark"
    assert "temperature" in caplog.text and "mystery" in caplog.text


def test_non_object_file_gives_defaults() -> None:
    settings_path().write_text("[1, 2]", encoding="utf-8")
    assert load_settings() == Settings()


def test_gpu_layers_are_kept_and_odd_values_fall_back(caplog: pytest.LogCaptureFixture) -> None:
    settings_path().write_text(json.dumps({"target_gpu_layers": 20, "draft_gpu_layers": -7}), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        s = load_settings()
    assert s.target_gpu_layers == 20
    assert s.draft_gpu_layers == Settings().draft_gpu_layers == "auto"
    assert "draft_gpu_layers" in caplog.text


@pytest.mark.parametrize(
    ("saved", "loaded"),
    [
        ("auto", "auto"),
        ("AUTO", "auto"),
        ("all", -1),
        (-1, -1),
        (0, 0),
        (33, 33),
        (33.0, 33),
        ("many", "auto"),
        (True, "auto"),
        (2.5, "auto"),
        (None, "auto"),
        (10_001, "auto"),
    ],
)
def test_gpu_layer_values(saved: object, loaded: object) -> None:
    settings_path().write_text(json.dumps({"target_gpu_layers": saved}), encoding="utf-8")
    assert load_settings().target_gpu_layers == loaded
    save_settings(load_settings())
    assert json.loads(settings_path().read_text(encoding="utf-8"))["target_gpu_layers"] == loaded


@pytest.mark.parametrize(("saved", "loaded"), [(1.0, 1.0), (1.25, 1.25), (0.5, 1.1), (3, 1.1), ("x", 1.1)])
def test_repeat_penalty_values(saved: object, loaded: float) -> None:
    settings_path().write_text(json.dumps({"repeat_penalty": saved}), encoding="utf-8")
    assert load_settings().repeat_penalty == loaded


def test_the_serving_settings_round_trip() -> None:
    s = Settings(serve_port=1234, serve_require_key=True, serve_api_key="sk-local-abc_DEF-123", serve_parallel=5)
    save_settings(s)
    stored = json.loads(settings_path().read_text(encoding="utf-8"))
    assert (stored["serve_port"], stored["serve_require_key"], stored["serve_api_key"], stored["serve_parallel"]) == (
        1234,
        True,
        "sk-local-abc_DEF-123",
        5,
    )
    assert load_settings() == s


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("serve_port", 0),
        ("serve_port", 70000),
        ("serve_port", "8080"),
        ("serve_port", 80.5),
        ("serve_port", True),
        ("serve_parallel", 0),
        ("serve_parallel", 17),
        ("serve_parallel", "2"),
        ("serve_parallel", 2.5),
        ("serve_require_key", "yes"),
        ("serve_require_key", 1),
        ("serve_api_key", 42),
        ("serve_api_key", "two words"),
        ("serve_api_key", "line\nbreak"),
        ("serve_api_key", "clé"),
        ("serve_api_key", "k" * 257),
    ],
)
def test_odd_serving_values_fall_back_with_a_logged_line(
    caplog: pytest.LogCaptureFixture, name: str, value: object
) -> None:
    settings_path().write_text(json.dumps({name: value, "theme": "dark"}), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        s = load_settings()
    assert getattr(s, name) == getattr(Settings(), name) and s.theme == "dark"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and name in warnings[0], warnings
    if name == "serve_api_key" and isinstance(value, str):
        assert value not in caplog.text  # a key, even a malformed one, stays out of the log


def test_a_key_a_client_cannot_send_is_one_line() -> None:
    from specchat.core.settings import check_api_key
    from specchat.core.types import SpecchatError

    assert check_api_key("sk-local-x") == "sk-local-x"
    for bad, said in (("", "empty"), ("a b", "no spaces"), ("k" * 300, "at most 256")):
        with pytest.raises(SpecchatError, match=said):
            check_api_key(bad)
