"""Recommended target/draft pairs, read from ``resources/catalog.json``.

Each half names a repository and a quantisation, not a file: the file is
resolved from the repository's listing at download time
(:func:`specchat.core.models.hub.pick_quant_files`). The ``local`` pair is the
offline demo, provisioned by :mod:`specchat.core.models.demo`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from specchat.core import paths
from specchat.core.types import SpecchatError

DEMO_PAIR_ID = "demo"


@dataclass(frozen=True)
class CatalogModel:
    """One half of a pair: a hub repository and the quantisation to fetch from it."""

    repo: str
    quant: str
    size_gb: float  # approximate download size


@dataclass(frozen=True)
class CatalogPair:
    """A recommended target and draft that share a tokenizer."""

    id: str
    name: str
    target: CatalogModel
    draft: CatalogModel
    memory_gb: float  # approximate memory to run both
    license: str
    good_for: str
    local: bool = False  # provisioned offline rather than downloaded

    @property
    def download_gb(self) -> float:
        return 0.0 if self.local else round(self.target.size_gb + self.draft.size_gb, 2)


def _model(raw: dict[str, object], where: str) -> CatalogModel:
    try:
        return CatalogModel(repo=str(raw["repo"]), quant=str(raw["quant"]), size_gb=float(raw["size_gb"]))  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError) as exc:
        raise SpecchatError(f"catalog entry {where} is malformed: {exc}") from None


def parse_catalog(text: str) -> tuple[CatalogPair, ...]:
    """Parse catalog JSON into pairs; raise SpecchatError on a malformed entry."""
    data = json.loads(text)
    pairs = []
    for raw in data["pairs"]:
        pid = str(raw.get("id", "?"))
        try:
            pairs.append(
                CatalogPair(
                    id=pid,
                    name=str(raw["name"]),
                    target=_model(raw["target"], f"{pid}.target"),
                    draft=_model(raw["draft"], f"{pid}.draft"),
                    memory_gb=float(raw["memory_gb"]),
                    license=str(raw["license"]),
                    good_for=str(raw["good_for"]),
                    local=bool(raw.get("local", False)),
                )
            )
        except KeyError as exc:
            raise SpecchatError(f"catalog entry {pid} lacks {exc}") from None
    ids = [p.id for p in pairs]
    if len(set(ids)) != len(ids):
        raise SpecchatError("catalog has duplicate pair ids")
    return tuple(pairs)


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
