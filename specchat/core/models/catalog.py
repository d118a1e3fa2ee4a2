"""Recommended pairs, read from ``resources/catalog.json``.

A pair is a target and what drafts for it: either a small model of the same
family (``draft`` names a repository and a quantisation) or the target's own
MTP / NextN heads (``"draft": {"mtp": true}``: nothing to download, the heads
are layers inside the target's file). Each downloaded half names a repository
and a quantisation, not a file: the file is resolved from the repository's
listing at download time (:func:`specchat.core.models.hub.pick_quant_files`).
``file`` records the name that resolution is expected to pick, as the
repository names it; tests resolve every entry against a loopback hub whose
listings name files that way. ``checked`` says where a name or size was seen;
the live hub was not reachable when the catalog was written. The ``local``
pair is the offline demo, provisioned by :mod:`specchat.core.models.demo`.

Sizes and memory, in decimal GB. A size not read from a listing is derived
from the parameter count (``params_b``, billions) and the quant::

    size_gb ~= params_b * BITS_PER_WEIGHT[quant] / 8

(llama.cpp's average bits per weight for the quant's mix of tensor types).
The memory to run a pair at the default 4096-token context is estimated as::

    memory_gb ~= 1.1 * (target + draft size) + 0.5 [+ 1.0 with MTP heads]

the tenth for compute buffers, 0.5 GB for the KV cache and recurrent state,
and 1 GB for the MTP block's own context and hidden-state buffers; catalog
entries round it up (:func:`estimate_memory_gb`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import lru_cache

from specchat.core import paths
from specchat.core.types import DrafterKind, SpecchatError

DEMO_PAIR_ID = "demo"

BITS_PER_WEIGHT: dict[str, float] = {
    "F32": 32.0,
    "F16": 16.0,
    "BF16": 16.0,
    "Q8_0": 8.5,
    "Q6_K": 6.56,
    "Q5_K_M": 5.69,
    "Q4_K_M": 4.89,
    "UD-Q4_K_XL": 5.0,  # Unsloth Dynamic: Q4_K with the sensitive tensors kept at 5-8 bits
    "Q4_1": 5.0,
    "Q4_0": 4.5,
}
COMPUTE_SHARE = 0.1  # of the weights, for llama.cpp's compute buffers
KV_GB = 0.5  # KV cache and recurrent state at 4096 tokens
MTP_GB = 1.0  # the MTP block's context (its own KV cache) and the target's hidden states


@dataclass(frozen=True)
class CatalogModel:
    """One downloaded half of a pair: a hub repository and the quantisation to fetch from it."""

    repo: str
    quant: str
    size_gb: float  # approximate download size
    file: str = ""  # the file the quant resolves to in the repo's listing
    params_b: float = 0.0  # parameters, billions
    checked: str = ""  # where the names and the size were seen, or how they were derived


@dataclass(frozen=True)
class CatalogPair:
    """A recommended target and its drafter: a draft model sharing its tokenizer, or its own MTP heads."""

    id: str
    name: str
    target: CatalogModel
    draft: CatalogModel | None  # None: the target drafts with its own MTP heads
    memory_gb: float  # approximate memory to run the pair
    license: str
    good_for: str  # short, for a table column
    local: bool = False  # provisioned offline rather than downloaded
    why: str = ""  # the reason for the pair, in full
    speedup: str = ""  # a published (or here measured) speed-up, with where it comes from

    @property
    def builtin_heads(self) -> bool:
        """True when the target speculates with its own MTP heads (no draft file)."""
        return self.draft is None

    @property
    def drafter(self) -> DrafterKind:
        """The drafter this pair is meant for: the draft model or the target's MTP heads."""
        return DrafterKind.MTP if self.draft is None else DrafterKind.DRAFT_MODEL

    @property
    def downloads(self) -> tuple[tuple[str, CatalogModel], ...]:
        """``(role, model)`` for each file to fetch: the target, then the draft when there is one."""
        halves = [("target", self.target)]
        if self.draft is not None:
            halves.append(("draft", self.draft))
        return tuple(halves)

    @property
    def download_gb(self) -> float:
        return 0.0 if self.local else round(sum(m.size_gb for _, m in self.downloads), 2)

    def to_json(self) -> dict[str, object]:
        """The pair as ``catalog.json`` writes it, plus ``drafter`` (``draft`` or ``mtp``)."""
        out = asdict(self)
        if self.draft is None:
            out["draft"] = {"mtp": True}
        out["drafter"] = self.drafter.value
        return out


ASSUMED_ACCEPTANCE = 0.7  # per drafted token, for a same-family draft on chat text
MTP_COST = 0.05  # one MTP block next to the whole target's pass


def expected_speedup(pair: CatalogPair) -> tuple[str, str]:
    """The speed-up to expect on a GPU, and how it was obtained: the published figure where there is one,
    else the standard estimate for a bandwidth-bound target.

    The estimate: with acceptance a per drafted token and a draft whose pass costs c of the target's
    (its size over the target's; an MTP block about 5%), drafting k tokens gives (1 - a**(k+1)) / (1 - a)
    tokens per round for the cost of 1 + k*c target passes; the best k's ratio is the speed-up.
    """
    if pair.speedup:
        return pair.speedup.split(" (")[0], pair.speedup
    cost = MTP_COST if pair.draft is None else pair.draft.size_gb / max(pair.target.size_gb, 1e-9)
    a = ASSUMED_ACCEPTANCE
    best = max((1 - a ** (k + 1)) / (1 - a) / (1 + k * cost) for k in range(1, 17))
    how = (
        f"estimate: {a:.0%} of drafts accepted (an assumption for a same-family drafter), the drafter costing "
        f"{cost:.0%} of a target pass, the best depth; measure it here for the real figure"
    )
    return f"≈{best:.1f}x", how


def derive_size_gb(params_b: float, quant: str) -> float:
    """A GGUF's approximate size from its parameter count: ``params_b * bits per weight / 8``."""
    bits = BITS_PER_WEIGHT.get(quant.upper())
    if bits is None:
        raise SpecchatError(f"no bits-per-weight figure for quant {quant!r}; known: {', '.join(BITS_PER_WEIGHT)}")
    return round(params_b * bits / 8, 3)


def estimate_memory_gb(pair: CatalogPair) -> float:
    """The memory a pair needs at 4096 tokens, unrounded (see the module docstring)."""
    weights = pair.target.size_gb + (pair.draft.size_gb if pair.draft is not None else 0.0)
    extra = MTP_GB if pair.builtin_heads else 0.0
    return (1 + COMPUTE_SHARE) * weights + KV_GB + extra


def _model(raw: object, where: str) -> CatalogModel:
    try:
        if not isinstance(raw, dict):
            raise TypeError(f"expected an object, got {type(raw).__name__}")
        return CatalogModel(
            repo=str(raw["repo"]),
            quant=str(raw["quant"]),
            size_gb=float(raw["size_gb"]),
            file=str(raw.get("file", "")),
            params_b=float(raw.get("params_b", 0.0)),
            checked=str(raw.get("checked", "")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SpecchatError(f"catalog entry {where} is malformed: {exc}") from None


def _draft(raw: object, pid: str, local: bool) -> CatalogModel | None:
    """The draft half, or None for ``{"mtp": true}`` (the target's own heads)."""
    if isinstance(raw, dict) and "mtp" in raw:
        if raw["mtp"] is not True or len(raw) != 1:
            raise SpecchatError(f'catalog entry {pid}.draft is malformed: MTP heads are written {{"mtp": true}}')
        if local:
            raise SpecchatError(f"catalog entry {pid} is local (the demo) and cannot draft with MTP heads")
        return None
    return _model(raw, f"{pid}.draft")


def parse_catalog(text: str) -> tuple[CatalogPair, ...]:
    """Parse catalog JSON into pairs; raise SpecchatError on a malformed entry."""
    data = json.loads(text)
    pairs = []
    for raw in data["pairs"]:
        pid = str(raw.get("id", "?"))
        try:
            local = bool(raw.get("local", False))
            pairs.append(
                CatalogPair(
                    id=pid,
                    name=str(raw["name"]),
                    target=_model(raw["target"], f"{pid}.target"),
                    draft=_draft(raw["draft"], pid, local),
                    memory_gb=float(raw["memory_gb"]),
                    license=str(raw["license"]),
                    good_for=str(raw["good_for"]),
                    local=local,
                    why=str(raw.get("why", "")),
                    speedup=str(raw.get("speedup", "")),
                )
            )
        except KeyError as exc:
            raise SpecchatError(f"catalog entry {pid} lacks {exc}") from None
    ids = [p.id for p in pairs]
    if len(set(ids)) != len(ids):
        raise SpecchatError("catalog has duplicate pair ids")
    return tuple(pairs)


@dataclass(frozen=True)
class CatalogHead:
    """A published head (EAGLE-3, DFlash, DSpark) for a target family, from the catalog's ``heads`` list.

    ``file`` names a GGUF to download; without one the head is published in another format (``format``)
    and must be converted with llama.cpp's ``convert_hf_to_gguf.py --target-model-dir``. ``checked`` says
    where the names were seen and what was not checked.
    """

    id: str
    kind: str  # a head format's kind (specchat.core.head_formats)
    label: str  # "DFlash head for Qwen3.6 27B"
    target_family: str  # the target's repository or base name, as family() reads it ("Qwen3.6-27B")
    repo: str
    size_gb: float = 0.0
    file: str = ""
    format: str = "gguf"
    checked: str = ""
    speedup: str = ""

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def _head_kind(kind: object) -> str:
    """``kind`` when a head format has that name; ValueError otherwise."""
    from specchat.core.head_formats import head_format

    if not isinstance(kind, str) or head_format(kind) is None:
        raise ValueError(f"no head format called {kind!r}")
    return kind


def parse_heads(text: str) -> tuple[CatalogHead, ...]:
    """The ``heads`` list of catalog JSON (absent: none); SpecchatError naming a malformed entry."""
    data = json.loads(text)
    out: list[CatalogHead] = []
    for raw in data.get("heads", []):
        hid = str(raw.get("id", "?")) if isinstance(raw, dict) else "?"
        try:
            if not isinstance(raw, dict):
                raise TypeError("not an object")
            head = CatalogHead(
                id=hid,
                kind=_head_kind(raw["kind"]),
                label=str(raw["label"]),
                target_family=str(raw["target_family"]),
                repo=str(raw["repo"]),
                size_gb=float(raw.get("size_gb", 0.0)),
                file=str(raw.get("file", "")),
                format=str(raw.get("format", "gguf")),
                checked=str(raw.get("checked", "")),
                speedup=str(raw.get("speedup", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SpecchatError(f"catalog head {hid} is malformed: {exc}") from None
        if head.format == "gguf" and not head.file.lower().endswith(".gguf"):
            raise SpecchatError(f"catalog head {hid} is a GGUF head but names no .gguf file")
        out.append(head)
    if len({h.id for h in out}) != len(out):
        raise SpecchatError("catalog has duplicate head ids")
    return tuple(out)


@lru_cache(maxsize=1)
def load_heads() -> tuple[CatalogHead, ...]:
    """The bundled catalog's published heads."""
    return parse_heads((paths.resources_dir() / "catalog.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def load_catalog() -> tuple[CatalogPair, ...]:
    """The bundled catalog, demo pair first."""
    return parse_catalog((paths.resources_dir() / "catalog.json").read_text(encoding="utf-8"))


def get_pair(pair_id: str) -> CatalogPair:
    """The pair with this id (case-insensitive); SpecchatError listing the ids otherwise."""
    for pair in load_catalog():
        if pair.id.lower() == pair_id.lower():
            return pair
    known = ", ".join(p.id for p in load_catalog())
    raise SpecchatError(f"no catalog pair named {pair_id!r}; known pairs: {known}")
