"""Talking to a Hugging Face hub: endpoint choice, error translation, GGUF search and file lists.

huggingface_hub reads ``HF_ENDPOINT`` once, at import time; :func:`resolve_endpoint`
reads it at call time and every call here passes the endpoint explicitly.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from specchat.core.models import hfcache
from specchat.core.models.errors import (
    DownloadCancelledError,
    HubAccessError,
    HubNetworkError,
    HubNotFoundError,
    HubProtocolError,
    UnsafePathError,
)
from specchat.core.types import SpecchatError

if TYPE_CHECKING:
    from huggingface_hub import HfApi

    from specchat.core.cancel import CancelToken

T = TypeVar("T")

DEFAULT_ENDPOINT = "https://huggingface.co"

_SPLIT_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_QUANT_RE = re.compile(
    r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32|FP16|FP32|TQ\d_\d)(?![A-Za-z0-9])", re.IGNORECASE
)


def resolve_endpoint(endpoint: str | None = None) -> str:
    """The hub to talk to: ``endpoint`` if given, else ``HF_ENDPOINT``, else huggingface.co."""
    return (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def resolve_token(token: str | None = None) -> str | bool | None:
    """An explicit token, else ``HF_TOKEN``, else whatever the hub's login stored (``None`` lets it look)."""
    return token or os.environ.get("HF_TOKEN") or None


@dataclass(frozen=True)
class HubRepo:
    """One search hit."""

    repo_id: str
    downloads: int | None
    likes: int | None
    last_modified: str | None = None  # ISO date (``2024-09-19``) of the last commit, when the hub says


@dataclass(frozen=True)
class HubFile:
    """A GGUF file in a repository."""

    filename: str
    size: int | None
    sha256: str | None

    @property
    def quant(self) -> str | None:
        return quant_of(self.filename)

    @property
    def split(self) -> tuple[int, int] | None:
        """``(part, of)`` for ``name-0000k-of-0000n.gguf`` files, else None."""
        m = _SPLIT_RE.search(self.filename)
        return (int(m.group(1)), int(m.group(2))) if m else None


def quant_of(filename: str) -> str | None:
    """The quantisation named in a GGUF file name (``Q4_K_M``, ``Q8_0``, ``F16`` ...), upper-cased."""
    base = filename.rsplit("/", 1)[-1]
    base = _SPLIT_RE.sub(".gguf", base)
    found = _QUANT_RE.findall(base)
    return found[-1].upper() if found else None


def side_file(filename: str) -> bool:
    """A vision projector or a drafter sidecar (MTP layers, an EAGLE-3 / DFlash / DSpark head) beside the models."""
    from specchat.core.models.heads import sidecar_kind

    *folders, name = filename.lower().split("/")
    return name.startswith(("mmproj", "mtp-", "mtp_")) or "mtp" in folders or sidecar_kind(filename) is not None


def sidecars_for(files: list[HubFile], model: str) -> list[tuple[str, HubFile]]:
    """``(kind, file)`` for each drafter sidecar ``llama-server -hf`` would fetch with ``model`` from this listing:
    a file named with a head format's keyword (``mtp-``, ``eagle3-`` ...) in the model's folder or above it, the
    best of each kind (see :func:`specchat.core.models.heads.find_sidecars`)."""
    from specchat.core.models.heads import find_sidecars

    by_name = {f.filename: f for f in files}
    return [(kind, by_name[name]) for kind, name in find_sidecars(list(by_name), model).items()]


def pick_quant_files(files: list[HubFile], quant: str, repo_id: str = "") -> list[HubFile]:
    """The file(s) of ``quant`` in a repo listing.

    Matching is on the quant as a whole word in the file name, case-insensitive
    (``q8_0`` matches ``Q8_0`` but ``Q4_0`` does not match ``Q4_0_4_4``).
    Side files are ignored: ``mmproj`` (vision projectors) and drafter sidecars (``mtp-*`` or
    under an ``MTP/`` folder, ``eagle3-*``, ``dflash-*``, ``dspark-*``), as llama.cpp's own downloader
    does. A split model (``-00001-of-00003.gguf``) returns all its parts, first shard first; llama.cpp
    loads it from the first part. When several single files match, the shortest
    name wins (``model-Q4_K_M.gguf`` over ``model-Q4_K_M-extra.gguf``).
    """
    want = re.compile(rf"(?<![A-Za-z0-9]){re.escape(quant)}(?![A-Za-z0-9_])", re.IGNORECASE)
    hits = [
        f
        for f in files
        if f.filename.lower().endswith(".gguf") and not side_file(f.filename) and want.search(f.filename)
    ]
    if not hits:
        available = sorted({q for f in files if (q := f.quant)})
        listed = ", ".join(available) if available else "none recognised"
        raise HubNotFoundError(f"no {quant} GGUF file in {repo_id or 'the repository'} (quants there: {listed})")
    singles = [f for f in hits if f.split is None]
    if singles:
        return [min(singles, key=lambda f: (len(f.filename), f.filename))]
    first = min((f for f in hits if f.split and f.split[0] == 1), key=lambda f: f.filename, default=None)
    if first is None:
        raise HubNotFoundError(f"the {quant} files in {repo_id} are split but the first part is missing")
    stem = _SPLIT_RE.sub("", first.filename)
    return sorted((f for f in hits if _SPLIT_RE.sub("", f.filename) == stem), key=lambda f: f.filename)


@contextmanager
def hub_errors(endpoint: str, repo_id: str, filename: str | None = None) -> Iterator[None]:
    """Turn huggingface_hub / HTTP exceptions into one-line SpecchatErrors naming the endpoint."""
    import httpx2
    from huggingface_hub import errors as hf_errors

    what = f"{repo_id}/{filename}" if filename else repo_id
    try:
        yield
    except SpecchatError:
        raise
    except hf_errors.GatedRepoError:
        raise HubAccessError(
            f"{repo_id} on {endpoint} is gated: accept its terms on the hub, then set HF_TOKEN or run `hf auth login`"
        ) from None
    except hf_errors.RevisionNotFoundError:
        raise HubNotFoundError(f"revision not found in {repo_id} on {endpoint}") from None
    except hf_errors.RemoteEntryNotFoundError:
        raise HubNotFoundError(f"file {filename or '?'} not found in {repo_id} on {endpoint}") from None
    except hf_errors.RepositoryNotFoundError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status == 401:
            raise HubAccessError(
                f"{repo_id} on {endpoint} is private or does not exist: set HF_TOKEN or run `hf auth login`"
            ) from None
        raise HubNotFoundError(f"repository {repo_id} not found on {endpoint}") from None
    except hf_errors.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403):
            raise HubAccessError(
                f"access to {what} on {endpoint} was refused ({status}): set HF_TOKEN or run `hf auth login`"
            ) from None
        if status == 404:
            raise HubNotFoundError(f"{what} not found on {endpoint}") from None
        raise HubNetworkError(f"{endpoint} answered {status} for {what}") from None
    except hf_errors.OfflineModeIsEnabled:
        raise HubNetworkError(f"offline mode is on (HF_HUB_OFFLINE): cannot reach {endpoint}") from None
    except hf_errors.HFValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsafePathError(f"refused by huggingface_hub before asking {endpoint}: {first}") from None
    except httpx2.TooManyRedirects:
        raise HubProtocolError(f"{endpoint} redirected the request for {what} in a loop; is it a hub?") from None
    except (httpx2.TransportError, ConnectionError) as exc:
        raise HubNetworkError(f"cannot reach {endpoint} ({type(exc).__name__}): is the network down?") from None
    except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
        raise HubProtocolError(f"{endpoint} gave an unusable answer for {what} ({type(exc).__name__})") from None


@contextmanager
def hub_answer(endpoint: str, what: str) -> Iterator[None]:
    """Turn an answer that does not parse as the hub's JSON (HTML, broken JSON, missing fields) into one line."""
    try:
        yield
    except SpecchatError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise HubProtocolError(
            f"{endpoint} answered the request for {what} with something that is not a hub answer "
            f"({type(exc).__name__}); is it a Hugging Face hub?"
        ) from None


def call_cancellable(
    fn: Callable[[], T], cancel: CancelToken | None, what: str, poll: float = 0.1, timeout: float | None = None
) -> T:
    """``fn()``, run on a daemon thread so that waiting for it ends within ``poll`` s of a cancel.

    A blocking HTTP call to a server that trickles its headers cannot be
    interrupted, but it can be abandoned: the thread finishes on its own at
    the call's timeout and its result is dropped. ``timeout`` gives up waiting
    after that many seconds (a one-line HubNetworkError). Without a token or a
    timeout ``fn`` runs on the calling thread.
    """
    if cancel is None and timeout is None:
        return fn()
    deadline = None if timeout is None else time.monotonic() + timeout
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="hub-call", daemon=True).start()
    while not done.wait(poll):
        if cancel is not None and cancel.cancelled:
            raise DownloadCancelledError(f"{what} cancelled")
        if deadline is not None and time.monotonic() > deadline:
            raise HubNetworkError(f"{what}: no answer in {timeout:.0f} s; is the hub up?")
    if "error" in box:
        raise box["error"]
    return cast(T, box["value"])


def _api(endpoint: str, token: str | None) -> HfApi:
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint, token=resolve_token(token))


SEARCH_FIELDS = ["downloads", "likes", "lastModified"]
_DAY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}")


def search_gguf(query: str, *, limit: int = 20, endpoint: str | None = None, token: str | None = None) -> list[HubRepo]:
    """Repositories tagged ``gguf`` whose name matches ``query``, most downloaded first.

    One request, not retried: a hub in trouble (a 500, HTML) is reported at once, not after a minute of backoff.
    """
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    ep = resolve_endpoint(endpoint)
    what = f"search {query!r}"
    params: dict[str, Any] = {"filter": "gguf", "search": query, "sort": "downloads", "limit": limit}
    params["expand"] = SEARCH_FIELDS
    with hub_answer(ep, what), hub_errors(ep, what):
        r = get_session().get(f"{ep}/api/models", params=params, headers=build_hf_headers(token=resolve_token(token)))
        hf_raise_for_status(r)
        found = r.json()
        if not isinstance(found, list):
            raise TypeError("a search answer that is not a list")
        return [_hub_repo(m) for m in found[:limit]]


def _hub_repo(m: Any) -> HubRepo:
    repo_id, downloads, likes, changed = m["id"], m.get("downloads"), m.get("likes"), m.get("lastModified")
    if not isinstance(repo_id, str) or not all(type(n) is int or n is None for n in (downloads, likes)):
        raise TypeError("a search hit with fields of the wrong type")
    day = changed[:10] if isinstance(changed, str) and _DAY_RE.match(changed) else None
    return HubRepo(repo_id=repo_id, downloads=downloads, likes=likes, last_modified=day)


def list_gguf_files(
    repo_id: str, *, revision: str | None = None, endpoint: str | None = None, token: str | None = None
) -> list[HubFile]:
    """The ``.gguf`` files of a repository with their sizes and LFS SHA-256, sorted by name.

    A listing that does not parse, or that names a file whose path could leave
    the download folder (``..``, absolute, backslashes), is refused as a whole.
    """
    ep = resolve_endpoint(endpoint)
    with hub_answer(ep, f"the file list of {repo_id}"), hub_errors(ep, repo_id):
        info = _api(ep, token).model_info(repo_id, revision=revision, files_metadata=True)
        files = [f for s in info.siblings or [] if (f := _hub_file(s, ep)) is not None]
    return sorted(files, key=lambda f: f.filename)


def _hub_file(sibling: Any, endpoint: str) -> HubFile | None:
    """A listing entry as a HubFile (None when it is no GGUF); its name is checked before anything else."""
    name = hfcache.check_relative_path(sibling.rfilename, f"file name listed by {endpoint}")
    if not name.lower().endswith(".gguf"):
        return None
    size = sibling.lfs.size if sibling.lfs else sibling.size
    sha = sibling.lfs.sha256 if sibling.lfs else None
    if size is not None and (not isinstance(size, int) or size < 0):
        raise TypeError(f"size {size!r} of {name}")
    if sha is not None and not (isinstance(sha, str) and hfcache.SHA256_RE.match(sha)):
        raise TypeError(f"sha256 {sha!r} of {name}")
    return HubFile(filename=name, size=size, sha256=sha)
