"""Syntax colours for code blocks, from Pygments (a light and a dark style)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.style import StyleMeta
from pygments.styles import get_style_by_name
from pygments.token import _TokenType
from pygments.util import ClassNotFound

LIGHT_STYLE = "default"
DARK_STYLE = "github-dark"


@dataclass(frozen=True)
class Look:
    """How one lexical class is drawn: a colour (``#rrggbb`` or "" for the text colour), bold, italic."""

    colour: str = ""
    bold: bool = False
    italic: bool = False


PLAIN = Look()


@lru_cache(maxsize=64)
def _lexer(lang: str) -> Lexer | None:
    if not lang:
        return None
    try:
        return get_lexer_by_name(lang.lower(), stripnl=False, ensurenl=False, stripall=False)
    except ClassNotFound:
        return None


@lru_cache(maxsize=2)
def _style(dark: bool) -> StyleMeta:
    return get_style_by_name(DARK_STYLE if dark else LIGHT_STYLE)


@lru_cache(maxsize=512)
def _look(ttype: _TokenType, dark: bool) -> Look:
    style = _style(dark)
    # A lexer may make a token type no style lists (YAML's Punctuation.Indicator): it is drawn as its nearest
    # listed parent, as Pygments' own formatters draw it.
    while not style.styles_token(ttype) and ttype.parent is not None:
        ttype = ttype.parent
    info = style.style_for_token(ttype)
    colour = f"#{info['color']}" if info.get("color") else ""
    return Look(colour, bool(info.get("bold")), bool(info.get("italic")))


def highlight(code: str, lang: str, dark: bool) -> list[tuple[str, Look]]:
    """``code`` cut into runs with their looks; one plain run when the language is unknown."""
    lexer = _lexer(lang)
    if lexer is None or not code:
        return [(code, PLAIN)]
    try:
        runs = [(value, _look(ttype, dark)) for ttype, value in lexer.get_tokens(code)]
    except Exception:  # noqa: BLE001 - a lexer's fault on a model's text must not stop the reply being drawn
        return [(code, PLAIN)]
    if "".join(value for value, _ in runs) != code:  # a lexer that rewrites its input: colour nothing
        return [(code, PLAIN)]
    return runs


def warm_up(langs: tuple[str, ...] = ("python",)) -> None:
    """Load the lexers of ``langs`` and both styles now (tens of ms the first time), not mid-reply."""
    for lang in langs:
        for dark in (False, True):
            highlight("x = 1\n", lang, dark)


__all__ = ["PLAIN", "Look", "highlight", "warm_up"]
