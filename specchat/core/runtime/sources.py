"""Drafting sources: the texts a reply's lookup searches beside the conversation, tokenized with the target."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specchat.core.engine.lookup import LookupText
from specchat.core.types import TextSource

PREDICTION_ANCHOR = 16
"""Prompt tokens put before a prediction's own: the reply's first tokens then match its start (a lookup needs
text before what it proposes), with the match length of a long copy."""


def lookup_texts(
    sources: Sequence[TextSource], prompt: Sequence[int], tokenize: Callable[[str], list[int]]
) -> list[LookupText]:
    """``sources`` as lookup texts for a reply to ``prompt``: each text's tokens, a prediction's after the
    prompt's last :data:`PREDICTION_ANCHOR` tokens. Both kinds are preferred on a match as long as the
    conversation's: a prediction is what the reply is expected to be, and an attachment that the window also put
    in the prompt is where that copy of the text came from ("lookup in report.pdf", not "in the conversation").
    Empty texts are left out."""
    texts: list[LookupText] = []
    for source in sources:
        ids = tokenize(source.text) if source.text else []
        if not ids:
            continue
        prediction = source.kind == "prediction"
        if prediction:
            ids = [*prompt[-PREDICTION_ANCHOR:], *ids]
        texts.append(LookupText.of(source.name, ids, preferred=True))
    return texts
