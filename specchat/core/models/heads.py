"""Drafting heads (EAGLE-3, DFlash, DSpark, split-out MTP layers): what a file is, and which target it fits.

A head is a small GGUF trained to draft for one target from that target's own
hidden states; it shares the target's tokenizer (the converters copy it from
the target) and names the target layers it reads. Everything here is decided
from the GGUF header, as llama.cpp decides it, without loading weights:

* ``general.architecture`` ``eagle3`` is an EAGLE-3 head; ``dflash`` a DFlash
  drafter, a DSpark one when the file has the Markov head tensor
  ``markov_w1.weight`` (llama.cpp's ``common_speculative_types_from_gguf``),
  DFlash2 when it has a selector (``dflash.selector_top_k`` > 0);
* ``{arch}.target_layers``: the target layers whose inputs it reads (an id equal
  to the target's layer count means its final hidden state); llama.cpp aborts
  the process on an id past that, so :func:`check_head` refuses it first;
* ``eagle3.target_hidden_size`` (EAGLE-3) or the drafter's own
  ``dflash.embedding_length`` (DFlash reads target states of its own width):
  must equal the target's hidden size.

Sidecars are found by name, as ``llama-server -hf`` finds them
(``common/download.cpp``): a ``.gguf`` whose file name contains a format's
keyword (``mtp-``, ``eagle3-``, ``dflash-``, ``dspark-``), in the model's folder
or one above it, the deepest folder first, then the quant closest to the model's.

The formats themselves (architecture, keyword, name, how the header tells them
apart) are one table, :data:`specchat.core.head_formats.HEAD_FORMATS`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat.core.head_formats import HeadFormat, HeadHeader, head_archs, head_format, read_format, sidecar_keywords
from specchat.core.models.errors import GgufReadError
from specchat.core.models.ggufmeta import GgufInfo, read_gguf_info

_SPLIT_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_BITS_RE = re.compile(r"(?<![A-Za-z0-9])(?:UD-)?I?Q(\d+)|(?<![A-Za-z0-9])B?F(16|32)(?![A-Za-z0-9])", re.IGNORECASE)
_NOISE_RE = re.compile(
    r"(?<![a-z0-9])(eagle-?3(?:\.1)?|dflash2?|dspark|mtp|draft(?:er)?|heads?|speculator|gguf|b16|ultrachat|"
    r"(?:ud-)?i?q\d(?:_[a-z0-9]+)*|bf16|f16|f32)(?![a-z0-9])",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class HeadInfo:
    """A head file as its header describes it."""

    path: Path
    kind: str  # its format's kind (specchat.core.head_formats)
    target_name: str  # the model it was trained for, from its metadata or its name ("" when neither says)
    target_layers: tuple[int, ...] = ()
    target_hidden_size: int | None = None  # the width of the target states it reads
    block_size: int | None = None  # DFlash / DSpark: tokens drafted per pass (llama.cpp's default is 16)
    selector_top_k: int = 0  # DFlash2's selector; 0 for the other formats
    sample_from_anchor: bool | None = None  # DSpark: an anchor-first block drafts block_size tokens
    causal: bool | None = None  # dflash.attention.causal
    has_confidence_head: bool | None = None  # DSpark
    info: GgufInfo | None = None

    @property
    def format(self) -> HeadFormat:
        """Its entry in the table of head formats."""
        found = head_format(self.kind)
        assert found is not None, self.kind
        return found

    @property
    def name(self) -> str:
        """``EAGLE-3 head``, ``DFlash2 head`` ...: its format's label."""
        return self.format.label

    @property
    def label(self) -> str:
        """``EAGLE-3 head for Llama 3.1 8B Instruct`` (without a target name: the kind alone)."""
        return f"{self.name} for {self.target_name}" if self.target_name else self.name

    @property
    def natural_depth(self) -> int | None:
        """The drafts one pass gives, as llama.cpp clamps them: DFlash ``block_size - 1`` (the first slot holds
        the last committed token), DSpark sampling from the anchor ``block_size``; None for step-by-step heads."""
        if not self.format.block:
            return None
        block = self.block_size or 16
        return block if self.format.anchor_draft and self.sample_from_anchor else block - 1

    def to_json(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "kind": self.kind,
            "name": self.name,
            "label": self.label,
            "target_name": self.target_name,
            "target_layers": list(self.target_layers),
            "target_hidden_size": self.target_hidden_size,
            "block_size": self.block_size,
            "selector_top_k": self.selector_top_k,
            "natural_depth": self.natural_depth,
        }


def sidecar_kind(filename: str) -> str | None:
    """The sidecar a file name says it is (``eagle3-Llama-3.1-8B-Q8_0.gguf`` -> EAGLE3), else None.

    As llama.cpp: the keyword anywhere in the file's name, case as written (``Qwen3.6-27B-MTP-Q4_K_M.gguf``
    is a target with MTP layers inside, not a sidecar; ``Qwen3.6-27B-DFlash-Q4_K_M.gguf`` is no sidecar either).
    """
    base = filename.rsplit("/", 1)[-1]
    if not base.lower().endswith(".gguf"):
        return None
    for keyword, kind in sidecar_keywords():
        if keyword in base:
            return kind
    return None


def quant_bits(filename: str) -> int:
    """The bit count a file name's quant says (``Q4_K_M`` -> 4, ``BF16`` -> 16), 0 when none (llama.cpp's rule)."""
    base = _SPLIT_RE.sub(".gguf", filename.rsplit("/", 1)[-1])
    found = _BITS_RE.findall(base)
    if not found:
        return 0
    q, f = found[-1]
    return int(q or f)


def _is_first_part(filename: str) -> bool:
    m = _SPLIT_RE.search(filename)
    return m is None or int(m.group(1)) == 1


def find_sidecars(files: Iterable[str], model: str) -> dict[str, str]:
    """The best sidecar of each kind for ``model`` among ``files`` (relative POSIX paths in one repository).

    llama.cpp's ``find_best_sibling``: a candidate must lie in the model's folder or a folder above it; the
    deepest such folder wins, then the quant closest to the model's.
    """
    model_dirs = model.split("/")[:-1]
    model_bits = quant_bits(model)
    best: dict[str, tuple[int, int, str]] = {}
    for name in files:
        kind = sidecar_kind(name)
        if kind is None or name == model or not _is_first_part(name):
            continue
        dirs = name.split("/")[:-1]
        if dirs != model_dirs[: len(dirs)]:
            continue
        score = (len(dirs), -abs(quant_bits(name) - model_bits), name)
        if kind not in best or score[:2] > best[kind][:2]:
            best[kind] = score
    return {kind: score[2] for kind, score in sorted(best.items(), key=lambda kv: kv[1][2])}


def _field(fields: dict[str, Any], key: str) -> Any:
    f = fields.get(key)
    return None if f is None else f.contents()


def _flag(value: object) -> bool | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def target_name_of(info: GgufInfo, base_model: str | None = None) -> str:
    """The target a head was made for: its base-model name when the converter wrote one, else its own name
    (or file name) without the head's words (``EAGLE3``, ``DFlash``, ``draft``, the quant ...)."""
    if base_model:
        return base_model.strip()
    for raw in (info.name, info.path.stem):
        text = _NOISE_RE.sub(" ", raw.replace("_", " "))
        text = re.sub(r"(?<=\s)-+|-+(?=\s)|^-+|-+$", " ", text)
        words = [w for w in re.split(r"[\s-]+", text) if w]
        if words:
            return " ".join(words)
    return ""


def read_head(path: Path | str, info: GgufInfo | None = None) -> HeadInfo | None:
    """The head a file is, from its header; None for an ordinary model (a target or a draft model).

    An MTP sidecar is a file named as one (``mtp-...``) whose header has NextN layers.
    Raises GgufReadError (one line) for a file that is not a readable GGUF.
    """
    import gguf

    path = Path(path)
    info = info if info is not None else read_gguf_info(path)
    arch = info.architecture
    if arch not in head_archs() and read_format(HeadHeader(arch, path.name, mtp_layers=info.mtp_layers)) is None:
        return None  # a model of its own: no head architecture, nor MTP layers named as a sidecar
    try:
        reader = gguf.GGUFReader(path)
        fields = reader.fields
        tensors = frozenset(t.name for t in reader.tensors)
        layers = _field(fields, f"{arch}.target_layers")
        base = _field(fields, "general.base_model.0.name")
        top_k = int(_field(fields, f"{arch}.selector_top_k") or 0)
        found = read_format(HeadHeader(arch, path.name, tensors, top_k, info.mtp_layers))
        if found is None:
            return None
        block = _field(fields, f"{arch}.block_size")
        hidden = _field(fields, f"{arch}.target_hidden_size")
        if found.block and hidden is None:  # a block head reads target states of its own width
            hidden = _field(fields, f"{arch}.embedding_length")
        head = HeadInfo(
            path=path,
            kind=found.kind,
            target_name=target_name_of(info, base if isinstance(base, str) else None),
            target_layers=tuple(int(x) for x in layers) if isinstance(layers, list) else (),
            target_hidden_size=None if hidden is None else int(hidden),
            block_size=None if block is None else int(block),
            selector_top_k=top_k,
            sample_from_anchor=_flag(_field(fields, f"{arch}.sample_from_anchor")),
            causal=_flag(_field(fields, f"{arch}.attention.causal")),
            has_confidence_head=_flag(_field(fields, f"{arch}.has_confidence_head")),
            info=info,
        )
    except (ValueError, KeyError, IndexError, TypeError, OSError) as exc:
        raise GgufReadError(f"{path} has malformed head metadata ({type(exc).__name__})") from None
    return head


LAYER_INPUT_ARCHS = frozenset(
    {
        "llama",
        "qwen3",
        "qwen3moe",
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "lfm2",
        "nemotron_h",
        "gpt-oss",
        "minimax-m2",
        "mimo2",
        "gemma4",
        "bailingmoe3",
        "deepseek4",
    }
)
"""Target architectures whose vendored llama.cpp graph records its layer inputs (``res->t_layer_inp[il]`` in
src/models/*.cpp); asking any other for them aborts the process."""
FINAL_INPUT_ARCHS = frozenset({"deepseek4", "mimo2", "nemotron_h"})
"""Those that also record the input of layer ``n_layer`` (the final hidden state): only there may a DFlash
head read layer id ``n_layer`` (``common/speculative.cpp`` asks for it unchecked; the graph asserts it exists)."""


def head_problems(head: HeadInfo, target: GgufInfo, n_layers: int, n_embd: int) -> list[str]:
    """Why ``head`` cannot draft for a target with ``n_layers`` layers of width ``n_embd`` ([] when it can).

    The one compatibility rule, used by the picker and the finder (headers) and by loading a head
    (:func:`specchat.core.runtime.runtime.check_head_fits`). The vocabulary must be the target's (the converters copy
    it); the target's graph must hand out layer inputs; every target layer id must lie in 0..n_layers-1, or
    be n_layers for a DFlash-family head on a target that records its final layer input (llama.cpp aborts
    otherwise); the states it reads must have the target's width; an EAGLE-3 head reads exactly three layers.
    """
    problems: list[str] = []
    h = head.info
    if (
        h is not None
        and h.vocab_fingerprint
        and target.vocab_fingerprint
        and h.vocab_fingerprint != target.vocab_fingerprint
    ):
        problems.append(f"its vocabulary is not the target's ({h.vocab_size} tokens against {target.vocab_size})")
    form = head.format
    if form.arch:  # a head of its own architecture reads target layers (MTP layers are the target's own)
        if not head.target_layers:
            problems.append("it names no target layers to read (no target_layers in its metadata)")
        elif form.target_layers and len(head.target_layers) != form.target_layers:
            problems.append(
                f"an {form.label} reads {form.target_layers} target layers, this one names {len(head.target_layers)}"
            )
        if target.architecture not in LAYER_INPUT_ARCHS:
            problems.append(f"llama.cpp cannot hand it the hidden states of a '{target.architecture}' target")
        last = n_layers if form.block and target.architecture in FINAL_INPUT_ARCHS else n_layers - 1
        beyond = [i for i in head.target_layers if i < 0 or i > last]
        if beyond:
            problems.append(
                f"it reads target layer {beyond[0]}, but the target has {n_layers} layers (trained for a deeper model)"
            )
        if head.target_hidden_size is not None and head.target_hidden_size != n_embd:
            problems.append(f"it reads target states {head.target_hidden_size} wide, the target's are {n_embd}")
    return problems


@dataclass(frozen=True)
class HeadCheck:
    """A head against a target: the problems (none: it fits), in one line for a label."""

    head: HeadInfo
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        if self.ok:
            return f"✓ {self.head.label}: fits this target"
        more = f" (+{len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        return f"✗ {self.head.label} does not fit this target: {self.problems[0]}{more}"


def check_head(target_path: Path | str, head: HeadInfo, target: GgufInfo | None = None) -> HeadCheck:
    """Judge ``head`` against the target file (headers only). GgufReadError for an unreadable target."""
    from specchat.core.models.shape import read_model_shape

    target = target if target is not None else read_gguf_info(Path(target_path))
    try:
        shape = read_model_shape(Path(target_path))
    except GgufReadError as exc:  # a target whose layers are unknown cannot be vouched for
        return HeadCheck(head, (f"the target's layers cannot be read ({exc})",))
    return HeadCheck(head, tuple(head_problems(head, target, shape.n_layers, shape.n_embd)))


def heads_beside(target_path: Path | str) -> list[Path]:
    """Sidecar files next to a target on disk, chosen per kind as ``llama-server -hf`` would: in its folder,
    or inside a hub snapshot in its folder or one above it up to the snapshot."""
    target = Path(target_path)
    root = _snapshot_root(target) or target.parent
    names: list[str] = []
    for where, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")] if root != target.parent else []
        names += [(Path(where) / n).relative_to(root).as_posix() for n in files if n.lower().endswith(".gguf")]
    model = target.relative_to(root).as_posix()
    return [root.joinpath(*name.split("/")) for name in find_sidecars(sorted(names), model).values()]


def _snapshot_root(path: Path) -> Path | None:
    """``.../snapshots/<commit>`` when ``path`` lies in a hub cache snapshot."""
    for parent in path.parents:
        if parent.parent.name == "snapshots":
            return parent
    return None
