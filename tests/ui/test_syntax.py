"""Syntax colours: every lexer's token types find a look in both styles, and a lexer's fault draws plain text."""

from __future__ import annotations

import pytest
from pygments.lexers import get_all_lexers, get_lexer_by_name

from specchat.ui import syntax
from specchat.ui.syntax import PLAIN, highlight

SAMPLE = 'key: [1, "two"]\n- item: {a: b}  # note\n<tag attr="x">&amp;</tag>\ndef f(x): return x ** 2 @ y\n'


def test_a_yaml_block_is_coloured_not_a_crash() -> None:
    """YAML's lexer makes a token type (Punctuation.Indicator) that neither style lists: it takes its parent's
    look, where it raised a KeyError mid-reply and the window stopped drawing the reply."""
    for dark in (False, True):
        runs = highlight("key: [1, 2]\n- item: {a: b}\n", "yaml", dark)
        assert "".join(text for text, _ in runs) == "key: [1, 2]\n- item: {a: b}\n"
        assert any(look != PLAIN for _, look in runs)


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_every_token_type_of_every_lexer_has_a_look(dark: bool) -> None:
    failed = []
    for _name, aliases, _files, _mimes in get_all_lexers():
        if not aliases:
            continue
        lexer = get_lexer_by_name(aliases[0])
        for ttype, _value in lexer.get_tokens(SAMPLE):
            try:
                syntax._look(ttype, dark)
            except KeyError:
                failed.append((aliases[0], ttype))
    assert not failed, failed


def test_a_lexer_that_fails_leaves_the_code_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def get_tokens(self, code: str) -> list[tuple[object, str]]:
            raise ValueError("a lexer's own bug")

    monkeypatch.setattr(syntax, "_lexer", lambda lang: Broken())
    assert highlight("x = 1\n", "python", False) == [("x = 1\n", PLAIN)]
