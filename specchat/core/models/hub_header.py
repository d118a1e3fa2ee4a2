"""A GGUF file's metadata read on the hub, before downloading it: the first megabytes, by a Range request.

The key/value section sits at the head of a GGUF file, so the identity, the
tokenizer (with every token text) and the layer shape of a model are known from
a few MB of a file of many GB. :func:`read_remote_model` asks for a growing
prefix until the key/value section parses; the result is judged with the same
rules as files on disk (:mod:`compat`, :mod:`fit`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from specchat.core.cancel import CancelToken
from specchat.core.models.errors import GgufReadError, HubProtocolError
from specchat.core.models.ggufmeta import GgufInfo, Vocab, parse_size_label, quant_name, vocab_fingerprint
from specchat.core.models.hub import call_cancellable, hub_errors, resolve_endpoint, resolve_token
from specchat.core.models.shape import ModelShape

FIRST_READ = 1 << 20  # most small models' headers fit; a 150k-token vocabulary needs about 4 MB
MAX_READ = 64 << 20  # past this, a header is not worth reading before the download
TIMEOUT = 20.0  # seconds for the hub to answer a header request

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_MAX_COUNT = 1 << 28


class _ShortError(Exception):
    """The prefix ends inside the key/value section: read more."""


@dataclass(frozen=True)
class RemoteModel:
    """A hub file's metadata (``info.path`` is its name in the repository) and shape, sized as the hub says."""

    repo_id: str
    filename: str
    info: GgufInfo
    shape: ModelShape | None  # None for a file without a transformer shape (a head, a projector)


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise _ShortError
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self) -> int:
        n = int(self.scalar("<Q"))
        if n > _MAX_COUNT:
            raise ValueError(f"implausible length {n}")
        return n

    def text(self) -> str:
        return self.take(self.count()).decode("utf-8", "surrogateescape")

    def value(self, vtype: int, depth: int = 0) -> Any:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.text()
        if vtype == _ARRAY and depth < 4:
            item = int(self.scalar("<I"))
            return [self.value(item, depth + 1) for _ in range(self.count())]
        raise ValueError(f"unknown value type {vtype}")


def parse_metadata(data: bytes) -> dict[str, Any]:
    """The key/value section of a GGUF prefix; :class:`_ShortError` when ``data`` ends inside it."""
    cur = _Cursor(data)
    if cur.take(4) != b"GGUF":
        raise ValueError("not a GGUF file (bad magic)")
    version = int(cur.scalar("<I"))
    if version not in (2, 3):
        raise ValueError(f"unsupported GGUF version {version}")
    cur.scalar("<Q")  # tensor count
    n_kv = cur.count()
    fields: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.text()
        fields[key] = cur.value(int(cur.scalar("<I")))
    return fields


def _int(value: object) -> int | None:
    if isinstance(value, list):
        return int(max(value)) if value else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    return None


def model_from_fields(repo_id: str, filename: str, size: int, fields: dict[str, Any]) -> RemoteModel:
    """The metadata a file on disk would give (:class:`GgufInfo`, :class:`ModelShape`), from its parsed fields."""
    arch = str(fields.get("general.architecture") or "unknown")
    tokens = [str(t) for t in fields.get("tokenizer.ggml.tokens") or []]
    types = [int(t) for t in fields.get("tokenizer.ggml.token_type") or []]
    tokenizer = fields.get("tokenizer.ggml.model")
    add_bos = fields.get("tokenizer.ggml.add_bos_token")
    size_label = fields.get("general.size_label")
    info = GgufInfo(
        path=Path(filename),  # a name in the repository, never opened
        file_size=size,
        mtime_ns=0,
        name=str(fields.get("general.name") or PurePosixPath(filename).stem),
        architecture=arch,
        basename=fields.get("general.basename"),
        size_label=size_label,
        parameter_count=parse_size_label(size_label),
        quant=quant_name(_int(fields.get("general.file_type"))),
        context_length=_int(fields.get(f"{arch}.context_length")),
        tokenizer_model=tokenizer,
        vocab_size=len(tokens),
        bos_id=_int(fields.get("tokenizer.ggml.bos_token_id")),
        eos_id=_int(fields.get("tokenizer.ggml.eos_token_id")),
        eot_id=_int(fields.get("tokenizer.ggml.eot_token_id")),
        add_bos=None if add_bos is None else bool(add_bos),
        vocab_fingerprint=vocab_fingerprint(tokenizer, tokens) if tokens else None,
        n_split=_int(fields.get("split.count")) or 1,
        mtp_layers=_int(fields.get(f"{arch}.nextn_predict_layers")) or 0,
        vocab=Vocab(tuple(tokens), tuple(types)),
    )
    n_layers = _int(fields.get(f"{arch}.block_count"))
    n_embd = _int(fields.get(f"{arch}.embedding_length"))
    shape = None
    if n_layers and n_embd:
        n_head = _int(fields.get(f"{arch}.attention.head_count")) or 1
        shape = ModelShape(
            file_size=size,
            n_layers=n_layers,
            n_embd=n_embd,
            n_head=n_head,
            n_head_kv=_int(fields.get(f"{arch}.attention.head_count_kv")) or n_head,
            head_dim_k=_int(fields.get(f"{arch}.attention.key_length")) or n_embd // n_head,
            head_dim_v=_int(fields.get(f"{arch}.attention.value_length")) or n_embd // n_head,
            context_length=_int(fields.get(f"{arch}.context_length")) or 0,
        )
    return RemoteModel(repo_id, filename, info, shape)


Fetch = Callable[[int], bytes]  # the first n bytes of the file (fewer when it is shorter)


def read_prefix_model(repo_id: str, filename: str, size: int, fetch: Fetch, what: str) -> RemoteModel:
    """Parse a growing prefix from ``fetch`` until the key/value section is whole; one line when it is not a GGUF."""
    limit = FIRST_READ
    while True:
        data = fetch(limit)
        try:
            fields = parse_metadata(data)
        except _ShortError:
            if len(data) < limit:
                raise GgufReadError(f"{what} ends inside its GGUF header (truncated or not a model)") from None
            if limit >= MAX_READ:
                raise GgufReadError(f"{what} has a header over {MAX_READ >> 20} MB; download it to check it") from None
            limit *= 4
            continue
        except (ValueError, UnicodeError, struct.error) as exc:
            raise GgufReadError(f"{what} is not a readable GGUF file ({exc})") from None
        try:
            return model_from_fields(repo_id, filename, size, fields)
        except (TypeError, ValueError, OverflowError) as exc:
            raise GgufReadError(f"{what} has malformed GGUF metadata ({type(exc).__name__})") from None


def read_remote_model(
    repo_id: str,
    filename: str,
    size: int,
    *,
    revision: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    cancel: CancelToken | None = None,
) -> RemoteModel:
    """A hub file's metadata from the first MBs of it (a Range request; nothing is written to disk)."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    ep = resolve_endpoint(endpoint)
    url = hf_hub_url(repo_id, filename, revision=revision or "main", endpoint=ep)
    headers = build_hf_headers(token=resolve_token(token), headers={"Accept-Encoding": "identity"})
    what = f"{repo_id}/{filename}"

    def fetch(limit: int) -> bytes:
        def get() -> bytes:
            wanted = {**headers, "Range": f"bytes=0-{limit - 1}"}
            with get_session().stream("GET", url, headers=wanted, follow_redirects=True, timeout=TIMEOUT) as r:
                if r.status_code >= 400:
                    r.read()
                hf_raise_for_status(r)
                if r.status_code not in (200, 206):
                    raise HubProtocolError(f"{ep} answered {r.status_code} for the header of {what}")
                got = bytearray()
                for block in r.iter_bytes():
                    got += block
                    if len(got) >= limit:  # a server that ignores the range sends the whole file: stop early
                        break
                return bytes(got[:limit])

        with hub_errors(ep, repo_id, filename):
            return call_cancellable(get, cancel, f"reading the header of {what}")

    return read_prefix_model(repo_id, filename, size, fetch, what)
