"""``specchat models ...``: the demo pair, the catalog, hub downloads, the local library, compatibility.

Exit codes: 0 success (``check``: compatible, with or without warnings);
1 ``check`` found the pair incompatible; 2 an error (SpecchatError, mapped in
``__main__``); 130 a download stopped with Ctrl-C (the partial file is kept
and the next run resumes it).

Heavy modules (huggingface_hub, gguf, tqdm) are imported inside the commands.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, TypeVar

from specchat.core.head_formats import sidecar_keywords, sidecar_kinds  # a table without imports: --help stays light

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from specchat.core.models.download import DownloadedFile

    R = TypeVar("R")

DEFAULT_CONTEXT = 4096  # what the window and `specchat chat` use unless told otherwise
EXIT_INCOMPATIBLE = 1
EXIT_CANCELLED = 130


def _keywords() -> str:
    """The sidecar file-name keywords, e.g. ``mtp-, eagle3-, dspark-, dflash-``."""
    return ", ".join(keyword for keyword, _ in sidecar_keywords())


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser("models", help="provision, find, download and check models")
    msub = parser.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    demo = msub.add_parser("demo", help="provision the offline demo pair; print its paths as JSON")
    demo.set_defaults(func=cmd_demo)

    lst = msub.add_parser("list", help="GGUF files already on disk (hub cache, app folder, LM Studio, llama.cpp)")
    lst.add_argument("--dir", action="append", default=[], metavar="DIR", help="also search this folder")
    lst.add_argument("--json", action="store_true", help="print JSON")
    lst.set_defaults(func=cmd_list)

    catalog = msub.add_parser("catalog", help="recommended target/draft pairs")
    catalog.add_argument("--json", action="store_true", help="print JSON")
    catalog.set_defaults(func=cmd_catalog)

    search = msub.add_parser("search", help="search the hub for GGUF repositories")
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=20)
    _hub_options(search, revision=False)
    search.set_defaults(func=cmd_search)

    files = msub.add_parser("files", help="a repository's GGUF files with sizes")
    files.add_argument("repo_id")
    _hub_options(files)
    files.set_defaults(func=cmd_files)

    dl = msub.add_parser(
        "download",
        help="download a GGUF file (resumable); prints its local path last (after any sidecars fetched with it)",
    )
    dl.add_argument("repo_id")
    dl.add_argument("filename", nargs="?", help="file in the repo (or give --quant)")
    dl.add_argument("--quant", help="pick the file of this quantisation, e.g. Q4_K_M")
    dl.add_argument("--local-dir", help="download into this folder instead of the hub cache")
    dl.add_argument(
        "--with-sidecars",
        action="store_true",
        help=f"also fetch the drafter sidecars beside the model ({_keywords()} files)",
    )
    dl.add_argument(
        "--sidecar",
        action="append",
        choices=sidecar_kinds(),
        metavar="KIND",
        help=f"also fetch the sidecar of this kind ({', '.join(sidecar_kinds())}); repeatable",
    )
    _hub_options(dl)
    dl.set_defaults(func=cmd_download)

    check = msub.add_parser("check", help="can DRAFT speculate for TARGET? exit 0 yes, 1 no")
    check.add_argument("target")
    check.add_argument("draft")
    check.add_argument("--n-ctx", type=int, help="context length you intend to use")
    check.add_argument("--json", action="store_true", help="print JSON")
    check.set_defaults(func=cmd_check)

    pair = msub.add_parser("pair", help="download both halves of a catalog pair; print their paths as JSON")
    pair.add_argument("name", help="catalog pair id (see `specchat models catalog`)")
    pair.add_argument("--local-dir", help="download into this folder instead of the hub cache")
    pair.add_argument(
        "--with-sidecars",
        action="store_true",
        help=f"also fetch the drafter sidecars beside the target ({_keywords()} files)",
    )
    _hub_options(pair, revision=False)
    pair.set_defaults(func=cmd_pair)

    from specchat.cli import advise

    advise.add_parser(msub)


def _hub_options(parser: argparse.ArgumentParser, revision: bool = True) -> None:
    parser.add_argument("--endpoint", help="hub URL (default: $HF_ENDPOINT or https://huggingface.co)")
    if revision:
        parser.add_argument("--revision", help="branch, tag or commit (default: main)")


def _size(n: float | None) -> str:
    from specchat.core.models.download import format_bytes

    return "?" if n is None else format_bytes(n)


def cmd_demo(args: argparse.Namespace) -> int:
    from specchat.core.models.demo import provision_demo_pair

    pair = provision_demo_pair()
    print(json.dumps({"target": str(pair.target), "draft": str(pair.draft)}))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from specchat.core.models.download import UNVERIFIED_NOTE
    from specchat.core.models.library import default_roots, scan

    result = scan(default_roots(args.dir))
    if args.json:
        print(json.dumps([e.to_json() for e in result.entries], indent=2))
    else:
        for e in result.entries:
            i = e.info
            params = f"{i.parameter_count / 1e9:.2f}B" if i.parameter_count else "?"
            print(
                f"{i.name[:40]:40} {i.quant or '?':8} {params:>8} ctx {i.context_length or '?':>7} "
                f"{_size(i.file_size):>9}  {e.source:9} {'unverified ' if e.unverified else ''}{i.path}"
            )
        print(f"{len(result.entries)} models ({result.read} read, {result.cached} from the index)", file=sys.stderr)
        for e in result.entries:
            if e.unverified:
                print(f"specchat: note: {e.path} is unverified: {UNVERIFIED_NOTE}", file=sys.stderr)
    for line in result.failed:
        print(f"specchat: skipped: {line}", file=sys.stderr)
    return 0


def cmd_catalog(args: argparse.Namespace) -> int:
    from specchat.core.models.catalog import load_catalog

    pairs = load_catalog()
    if args.json:
        print(json.dumps([p.to_json() for p in pairs], indent=2))
        return 0
    width = max(len(p.id) for p in pairs)
    pad = " " * (width + 2 + 7 + 2)
    for p in pairs:
        where = "local, no download" if p.local else f"{p.download_gb:.1f} GB download"
        marker = "own MTP" if p.builtin_heads else "draft"  # what speculates: built-in heads or a draft model
        draft = f"{p.draft.repo} {p.draft.quant}" if p.draft else "the target's own MTP heads (nothing to download)"
        print(f"{p.id:{width}}  {marker:7}  {p.name}  ({where}, ~{p.memory_gb:.0f} GB memory, {p.license})")
        print(f"{pad}target {p.target.repo} {p.target.quant}; draft {draft}")
        print(f"{pad}good for: {p.good_for}")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from specchat.core.models.hub import search_gguf

    for repo in search_gguf(args.query, limit=args.limit, endpoint=args.endpoint):
        print(f"{repo.repo_id:60} {repo.downloads or 0:>10} downloads")
    return 0


def cmd_files(args: argparse.Namespace) -> int:
    from specchat.core.head_formats import head_label
    from specchat.core.models.heads import sidecar_kind
    from specchat.core.models.hub import list_gguf_files

    for f in list_gguf_files(args.repo_id, revision=args.revision, endpoint=args.endpoint):
        kind = sidecar_kind(f.filename)
        what = f"  sidecar: {head_label(kind)}" if kind is not None else ""
        print(f"{f.filename:70} {f.quant or '?':8} {_size(f.size):>10}{what}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from specchat.core.models.compat import check_pair
    from specchat.core.models.errors import GgufReadError
    from specchat.core.settings import FLAG_LIMITS
    from specchat.core.types import SpecchatError

    if args.n_ctx is not None:
        FLAG_LIMITS["n_ctx"].check(args.n_ctx)
    try:
        report = check_pair(args.target, args.draft, n_ctx=args.n_ctx)
    except GgufReadError as exc:  # llama.cpp would refuse the file too
        raise SpecchatError(f"could not verify the pair: {exc}") from None
    memory = _memory_fit(args.target, args.draft, args.n_ctx or DEFAULT_CONTEXT)
    kinds = {role: _kind(path) for role, path in (("target", args.target), ("draft", args.draft))}
    if args.json:
        print(json.dumps({**report.to_json(), "memory": memory, "kinds": kinds}, indent=2))
    else:
        print(report.summary())
        for line in report.problems:
            print(f"  problem: {line}")
        for line in report.warnings:
            print(f"  warning: {line}")
        for line in report.notes:
            print(f"  note: {line}")
        print(f"  memory: {memory['text']}")
        for role, kind in kinds.items():
            print(f"  {role}: {kind['text']}")
    return 0 if report.ok else EXIT_INCOMPATIBLE


def _kind(path: str) -> dict[str, object]:
    """Dense, hybrid or recurrent, and how rejected drafts are taken back (llama.cpp asked, no weights read)."""
    from specchat.core.runtime.build import model_memory
    from specchat.core.types import SpecchatError

    try:
        info = model_memory(path)
    except SpecchatError as exc:
        return {"text": f"cannot tell: {exc}"}
    return {**info.to_json(), "text": info.describe()}


def _memory_fit(target: str, draft: str, n_ctx: int) -> dict[str, object]:
    """Whether the pair fits this machine (as the model picker says it), for `models check`."""
    from specchat.core.models.fit import fit_files, machine_memory
    from specchat.core.types import SpecchatError

    try:
        fit = fit_files(target, draft, n_ctx, machine_memory())
    except SpecchatError as exc:
        return {"ok": None, "text": f"cannot tell: {exc}"}
    return {"ok": fit.ok, "text": fit.text}


def _run_with_bar(job: Callable[..., R], **kwargs: object) -> R | None:
    """Run a download on a worker thread with a tqdm bar per file on stderr; Ctrl-C cancels it (returns None).

    ``job(cancel=, on_progress=, **kwargs)``; ``on_progress`` takes a DownloadProgress.
    """
    from tqdm import tqdm

    from specchat.core.cancel import CancelToken
    from specchat.core.models.download import DownloadProgress

    token = CancelToken()
    bars: dict[str, tqdm] = {}
    results: list[R] = []
    errors: list[BaseException] = []

    def on_progress(event: DownloadProgress) -> None:
        bar = bars.get(event.filename)
        if bar is None:
            bar = bars[event.filename] = tqdm(
                total=event.total,
                initial=event.resumed_from,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=event.filename.rsplit("/", 1)[-1][-40:],
                file=sys.stderr,
                leave=True,
            )
        bar.update(event.done - bar.n)

    def work() -> None:
        try:
            results.append(job(cancel=token, on_progress=on_progress, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - raised again on the main thread
            errors.append(exc)

    thread = threading.Thread(target=work, name="download", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.2)
    except KeyboardInterrupt:
        token.cancel()
        deadline = time.monotonic() + 10
        while thread.is_alive() and time.monotonic() < deadline:
            thread.join(0.2)  # a second Ctrl-C lands here and ends the command at once
    finally:
        for bar in bars.values():
            bar.close()
    if token.cancelled:
        print("specchat: download cancelled; the partial file is kept, run the same command to resume", file=sys.stderr)
        return None
    if errors:
        raise errors[0]
    return results[0]


def _note_unverified(files: Iterable[DownloadedFile]) -> None:
    from specchat.core.models.download import UNVERIFIED_NOTE

    for f in files:
        if not f.verified:
            print(f"specchat: note: {f.filename} is unverified: {UNVERIFIED_NOTE}", file=sys.stderr)


def cmd_download(args: argparse.Namespace) -> int:
    from pathlib import Path

    from specchat.core.models.download import download_file, download_quant, download_sidecars
    from specchat.core.models.hub import list_gguf_files, sidecars_for
    from specchat.core.types import SpecchatError

    if bool(args.filename) == bool(args.quant):
        raise SpecchatError("give either a FILENAME or --quant, not both or neither")
    common = {
        "revision": args.revision,
        "endpoint": args.endpoint,
        "local_dir": Path(args.local_dir) if args.local_dir else None,
    }
    kinds = None if args.with_sidecars else args.sidecar  # None: every sidecar there; [] or absent: none

    def job(**kw: Any) -> tuple[list[DownloadedFile], list[tuple[str, DownloadedFile]], list[tuple[str, str]]]:
        if args.quant:
            files = download_quant(args.repo_id, args.quant, **kw)
        else:
            files = [download_file(args.repo_id, args.filename, **kw)]
        model = files[0].filename
        if args.with_sidecars or args.sidecar:
            return files, download_sidecars(args.repo_id, model, kinds=kinds, **kw), []
        listing = list_gguf_files(args.repo_id, revision=args.revision, endpoint=args.endpoint)
        return files, [], [(kind, f.filename) for kind, f in sidecars_for(listing, model)]

    got = _run_with_bar(job, **common)
    if got is None:
        return EXIT_CANCELLED
    files, sidecars, offered = got
    _note_unverified([*files, *(f for _, f in sidecars)])
    for kind, name in offered:
        print(
            f"specchat: note: {args.repo_id} also holds a {kind} sidecar for this model: {name}; "
            f"add --sidecar {kind} (or --with-sidecars) to fetch it",
            file=sys.stderr,
        )
    for _, f in sidecars:
        print(f.path)
    for f in files:
        print(f.path)
    return 0


def cmd_pair(args: argparse.Namespace) -> int:
    from pathlib import Path

    from specchat.core.models.catalog import get_pair
    from specchat.core.models.download import DownloadProgress
    from specchat.core.models.pairs import DownloadedPair, download_pair

    pair = get_pair(args.name)
    if pair.local:
        return cmd_demo(args)
    local_dir = Path(args.local_dir) if args.local_dir else None

    def job(on_progress: Callable[[DownloadProgress], None], **kw: Any) -> DownloadedPair:
        return download_pair(
            pair, on_progress=lambda _role, event: on_progress(event), sidecars=args.with_sidecars, **kw
        )

    got = _run_with_bar(job, endpoint=args.endpoint, local_dir=local_dir)
    if got is None:
        return EXIT_CANCELLED
    _note_unverified(got.files)
    for kind, name in got.offered:
        print(
            f"specchat: note: {pair.target.repo} also holds a {kind} sidecar for the target: {name}; "
            "add --with-sidecars to fetch it",
            file=sys.stderr,
        )
    target, draft = got.paths
    print(json.dumps({"target": target, "draft": draft, "sidecars": {kind: str(f.path) for kind, f in got.sidecars}}))
    return 0
