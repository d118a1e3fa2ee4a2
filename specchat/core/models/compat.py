"""Can this draft model speculate for that target? Decided from GGUF metadata alone.

The engine feeds the same token ids to both models and lets the target verify
every drafted id, so the pair must agree on what each id means. Rules:

* incompatible: different tokenizer types; any differing token text in the
  shared id range (beyond the first few special ids); more than
  ``MAX_REAL_TAIL`` real (non-padding) tokens that only one side has (the
  tolerance llama.cpp's own speculative example uses).
* warning: a tail of padding / unused tokens on one side, or a few real ones;
  differing token texts among the first ``SPECIAL_HEAD`` ids; different
  BOS/EOS/EOT ids or add-BOS flag; a draft larger than ``SIZE_RATIO_WARN`` of the
  target's file size; a draft (or target) context shorter than the ``n_ctx``
  asked for; different families (architecture or base name).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from pathlib import Path

from specchat.core.models.ggufmeta import GgufInfo, read_gguf_info

MAX_REAL_TAIL = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
SPECIAL_HEAD = 5  # llama.cpp's SPEC_VOCAB_CHECK_START_TOKEN_ID
SIZE_RATIO_WARN = 0.5
_UNUSED_TYPE = 5  # gguf.TokenType.UNUSED
_PADDING_RE = re.compile(
    r"^(\[PAD\d*\]|<pad\w*>|<\|?extra_?\w*\|?>|<unused\d+>|<\|reserved_special_token_\d+\|>|<\|?dummy\w*\|?>"
    r"|<\|?placeholder\w*\|?>|\[UNUSED\w*\])$",
    re.IGNORECASE,
)


class Verdict(str, enum.Enum):
    COMPATIBLE = "compatible"
    WARNINGS = "compatible-with-warnings"
    INCOMPATIBLE = "incompatible"


@dataclass(frozen=True)
class CompatReport:
    """The verdict, the problems that make a pair unusable, warnings, and neutral notes."""

    verdict: Verdict
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    target: GgufInfo | None = None
    draft: GgufInfo | None = None

    @property
    def reasons(self) -> list[str]:
        """Why the verdict is not plain ``compatible``: problems first, then warnings."""
        return self.problems + self.warnings

    @property
    def ok(self) -> bool:
        return self.verdict is not Verdict.INCOMPATIBLE

    def summary(self) -> str:
        first = self.reasons[0] if self.reasons else (self.notes[0] if self.notes else "same vocabulary")
        more = f" (+{len(self.reasons) - 1} more)" if len(self.reasons) > 1 else ""
        return f"{self.verdict.value}: {first}{more}"

    def to_json(self) -> dict[str, object]:
        return {
            "verdict": self.verdict.value,
            "problems": self.problems,
            "warnings": self.warnings,
            "notes": self.notes,
            "target": None if self.target is None else self.target.to_json(),
            "draft": None if self.draft is None else self.draft.to_json(),
        }


def _is_padding(text: str, token_type: int | None) -> bool:
    return token_type == _UNUSED_TYPE or bool(_PADDING_RE.match(text))


def _family(info: GgufInfo) -> str:
    return re.sub(r"[^a-z]", "", (info.basename or "").lower())


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _compare_vocab(target: GgufInfo, draft: GgufInfo, problems: list[str], warnings: list[str]) -> None:
    if target.tokenizer_model != draft.tokenizer_model:
        problems.append(
            f"different tokenizers: the target uses {target.tokenizer_model!r}, the draft {draft.tokenizer_model!r}"
        )
        return
    if target.vocab is None or draft.vocab is None:  # metadata only: the fingerprint must match
        if target.vocab_fingerprint != draft.vocab_fingerprint:
            problems.append("the vocabularies differ (fingerprints do not match)")
        return
    t_tokens, d_tokens = target.vocab.tokens, draft.vocab.tokens
    shared = min(len(t_tokens), len(d_tokens))
    diffs = [i for i in range(shared) if t_tokens[i] != d_tokens[i]]
    late = [i for i in diffs if i >= SPECIAL_HEAD]
    if late:
        i = late[0]
        problems.append(
            f"different vocabularies: {len(late)} of the {shared} shared token ids have different texts "
            f"(first at id {i}: target {t_tokens[i]!r}, draft {d_tokens[i]!r})"
        )
        return
    if diffs:
        warnings.append(f"special tokens at ids {diffs} have different texts; they rarely appear in replies")
    if len(t_tokens) != len(d_tokens):
        longer, side = (target, "target") if len(t_tokens) > len(d_tokens) else (draft, "draft")
        assert longer.vocab is not None
        tail = range(shared, len(longer.vocab.tokens))
        types = longer.vocab.types
        real = [i for i in tail if not _is_padding(longer.vocab.tokens[i], types[i] if i < len(types) else None)]
        extra = len(tail)
        if not real:
            warnings.append(
                f"the {side} has {extra} extra padding/unused tokens after id {shared - 1}; they are never produced"
            )
        elif len(real) <= MAX_REAL_TAIL:
            warnings.append(
                f"the {side} has {extra} extra tokens ({len(real)} real, first {longer.vocab.tokens[real[0]]!r}); "
                "the other model cannot take them"
            )
        else:
            problems.append(
                f"vocabulary sizes differ too much: target {len(t_tokens)}, draft {len(d_tokens)} "
                f"({len(real)} real tokens only the {side} has)"
            )


def compare(target: GgufInfo, draft: GgufInfo, *, n_ctx: int | None = None) -> CompatReport:
    """Judge a pair from its metadata; pass infos read ``with_vocab=True`` for a token-level check."""
    problems: list[str] = []
    warnings: list[str] = []
    notes: list[str] = []
    _compare_vocab(target, draft, problems, warnings)

    for label, t_id, d_id in (
        ("BOS", target.bos_id, draft.bos_id),
        ("EOS", target.eos_id, draft.eos_id),
        ("EOT", target.eot_id, draft.eot_id),
    ):
        if t_id != d_id:
            warnings.append(f"{label} token ids differ (target {t_id}, draft {d_id})")
    if bool(target.add_bos) != bool(draft.add_bos):
        warnings.append(
            f"the target {'adds' if target.add_bos else 'does not add'} a BOS token, "
            f"the draft {'does' if draft.add_bos else 'does not'}"
        )

    if target.file_size > 0:
        ratio = draft.file_size / target.file_size
        if ratio > SIZE_RATIO_WARN:
            warnings.append(
                f"the draft is not much smaller than the target ({_gb(draft.file_size)} vs {_gb(target.file_size)}, "
                f"{ratio:.0%}); speculation rarely pays off unless the draft is several times smaller"
            )
        else:
            sizes = f"{_gb(draft.file_size)} vs {_gb(target.file_size)}"
            notes.append(f"draft is {ratio:.0%} of the target's size ({sizes})")

    if n_ctx is not None:
        for label, info in (("draft", draft), ("target", target)):
            if info.context_length is not None and info.context_length < n_ctx:
                warnings.append(
                    f"the {label}'s context is {info.context_length} tokens, shorter than the {n_ctx} asked for"
                )

    if target.architecture != draft.architecture:
        warnings.append(
            f"different families: target architecture {target.architecture!r}, draft {draft.architecture!r}"
        )
    else:
        tf, df = _family(target), _family(draft)
        if tf and df and tf not in df and df not in tf:
            warnings.append(f"different model families: {target.basename!r} and {draft.basename!r}")

    verdict = Verdict.INCOMPATIBLE if problems else Verdict.WARNINGS if warnings else Verdict.COMPATIBLE
    return CompatReport(verdict, problems, warnings, notes, target, draft)


def check_pair(target_path: Path | str, draft_path: Path | str, *, n_ctx: int | None = None) -> CompatReport:
    """Read both files' headers and vocabularies and judge the pair (see the module docstring)."""
    target = read_gguf_info(Path(target_path), with_vocab=True)
    draft = read_gguf_info(Path(draft_path), with_vocab=True)
    return compare(target, draft, n_ctx=n_ctx)
