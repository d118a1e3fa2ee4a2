"""The "Serve on localhost" dialog on its own: what it starts from, its key, and a key no client could send."""

from __future__ import annotations

import json
import logging

import pytest

from specchat.core.settings import Settings, load_settings, settings_path
from specchat.ui.serve_dialog import ServeChoice, ServeDialog, new_api_key


def test_it_starts_from_the_settings_and_remembers_what_it_was_given(qtbot) -> None:
    settings = Settings(serve_port=1234, serve_require_key=False, serve_api_key="sk-local-kept")
    dialog = ServeDialog(settings)
    qtbot.addWidget(dialog)
    assert dialog.port.value() == 1234 and dialog.key.text() == "sk-local-kept" and not dialog.key.isEnabled()
    assert dialog.choice() == ServeChoice(1234, None) and dialog.url.text() == "http://127.0.0.1:1234/v1"
    dialog.require_key.setChecked(True)  # the kept key, not a new one
    assert dialog.choice() == ServeChoice(1234, "sk-local-kept") and dialog.ok.isEnabled()
    dialog.port.setValue(4321)
    assert dialog.parallel.value() == 2  # the default: two served requests at once, beside the window's reply
    dialog.parallel.setValue(1)
    assert dialog.choice() == ServeChoice(4321, "sk-local-kept", 1)
    dialog.remember(settings)
    assert (settings.serve_port, settings.serve_require_key, settings.serve_api_key) == (4321, True, "sk-local-kept")
    assert settings.serve_parallel == 1


def test_a_key_no_client_could_send_is_one_line_and_serve_waits(qtbot) -> None:
    settings = Settings()
    dialog = ServeDialog(settings)
    qtbot.addWidget(dialog)
    dialog.require_key.setChecked(True)
    for bad, said in (("two words", "no spaces"), ("clé-secrète", "printable ASCII"), ("", "press Generate")):
        dialog.key.setText(bad)
        assert not dialog.ok.isEnabled() and said in dialog.problem.text(), dialog.problem.text()
        assert "\n" not in dialog.problem.text() and not dialog.problem.isHidden()
    dialog.require_key.setChecked(False)  # no key asked for: nothing to refuse
    assert dialog.ok.isEnabled() and dialog.problem.isHidden() and dialog.choice().api_key is None
    dialog.remember(settings)
    assert settings.serve_api_key == ""  # the empty field (a bad one would be left out too)
    dialog.require_key.setChecked(True)
    dialog.key.setText("  sk-local-padded  ")  # pasted with spaces around it
    assert dialog.ok.isEnabled() and dialog.choice().api_key == "sk-local-padded"


def test_generated_keys_are_random_and_sendable() -> None:
    keys = {new_api_key() for _ in range(50)}
    assert len(keys) == 50
    assert all(k.startswith("sk-local-") and k.isascii() and " " not in k and len(k) == 41 for k in keys)


def test_odd_stored_values_open_the_dialog_on_the_defaults(qtbot, caplog: pytest.LogCaptureFixture) -> None:
    settings_path().write_text(
        json.dumps({"serve_port": -1, "serve_require_key": "sure", "serve_api_key": ["not", "a", "key"]}),
        encoding="utf-8",
    )
    with caplog.at_level(logging.WARNING):
        settings = load_settings()
    assert sum("serve_" in r.getMessage() for r in caplog.records) == 3
    dialog = ServeDialog(settings)
    qtbot.addWidget(dialog)
    assert dialog.choice() == ServeChoice(8080, None) and dialog.key.text() == "" and dialog.ok.isEnabled()
