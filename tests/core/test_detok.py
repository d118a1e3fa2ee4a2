"""The incremental detokenizer never shows half a character."""

from __future__ import annotations

from specchat.core.engine.detok import Detokenizer


def _split_bytes(text: str, sizes: list[int]) -> dict[int, bytes]:
    data = text.encode("utf-8")
    pieces, pos = {}, 0
    for i, size in enumerate(sizes):
        pieces[i] = data[pos : pos + size]
        pos += size
    assert pos == len(data)
    return pieces


def test_multibyte_characters_are_held_back_until_complete() -> None:
    text = "né 😀!"  # é is 2 bytes, the emoji 4
    pieces = _split_bytes(text, [2, 1, 2, 2, 2])  # n\xc3 | \xa9 | " "\xf0 | \x9f\x98 | \x80!
    d = Detokenizer(pieces.__getitem__)
    shown = [d.push(i) for i in range(len(pieces))]
    assert all("\ufffd" not in s for s in shown)
    assert shown[0] == "n"  # the first byte of é is held back
    assert shown[1] == "é"
    assert shown[3] == ""  # the middle of the emoji
    assert "".join(shown) == text
    assert d.flush() == ""


def test_fork_does_not_disturb_the_original() -> None:
    pieces = {0: b"a", 1: "€".encode()[:1], 2: "€".encode()[1:], 3: b"x"}
    d = Detokenizer(pieces.__getitem__)
    assert d.push(0) == "a"
    assert d.push(1) == ""
    fork = d.fork()
    assert fork.push(3) == "\ufffdx"  # a wrong guess after a partial char shows as replacement
    assert d.push(2) == "€"  # the original still holds its partial bytes


def test_real_tokenizer_round_trip(demo_pair) -> None:
    from specchat.core.llama.model import Model

    model = Model(demo_pair.draft, vocab_only=True)
    text = " Café naïve 日本語 🚲 — “quoted”"
    tokens = model.tokenize(text, add_special=False, parse_special=False)
    d = Detokenizer(model.piece)
    shown = [d.push(t) for t in tokens]
    assert "".join(shown) == text
    assert all("\ufffd" not in s for s in shown)
    # Some token really did end mid-character in this text, so holding back mattered.
    assert any(s == "" for s in shown)
