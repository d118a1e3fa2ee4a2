"""The Hugging Face cache layout, with every path segment checked before it becomes a path.

The layout is huggingface_hub's own, so its tools (``scan_cache_dir``,
``try_to_load_from_cache``) read what specchat writes:

* cache: ``<cache>/models--org--name/`` holding ``blobs/<hash>``,
  ``snapshots/<commit>/<filename>`` (a relative symlink to the blob) and
  ``refs/<revision>`` (the commit), with locks under ``<cache>/.locks/models--org--name/``;
* ``local_dir``: ``<dir>/<filename>``, with metadata, locks and partial files
  under ``<dir>/.cache/huggingface/download/``.

specchat adds one thing the library ignores: ``blobs/<hash>.unverified`` next to
a blob whose hub ETag was no content hash (only its size could be checked).
Every path into the cache is built here; the rest of specchat asks this module.

Which checks come from huggingface_hub and which are done here: the repo id
goes through its ``validate_repo_id`` (inside ``repo_folder_name``) and a
commit id must match its ``REGEX_COMMIT_HASH``. Everything else is checked
here because the library does not check it in a form we can call: the
X-Repo-Commit header and the ETag are used as folder and file names unchecked
by ``hf_hub_download``, ``refs/<revision>`` is joined as given, its only
snapshot-path guard (``_get_pointer_path``) is private and compares
``abspath``\\ s without following a symlinked folder, and ``local_dir`` paths
are checked for ``..`` only on Windows. So a file name must be a relative
POSIX path (no ``..``/``.``/empty segments, no absolute part, backslash, drive,
NUL or control character), a blob name a SHA-256 or git SHA-1 in lower-case hex,
and every path built from them must resolve inside its base folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from specchat.core.models.errors import UnsafePathError

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
SHA1_RE = re.compile(r"^[0-9a-f]{40}$")
_TOKEN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+=-]{0,199}$")
_DRIVE_RE = re.compile(r"^[A-Za-z]:")
_REPO_FOLDER_RE = re.compile(r"^models--(.+)$")
_MAX_SEGMENT_BYTES = 255  # the common file-name limit (ext4, APFS, NTFS)


def hf_cache_dir() -> Path:
    """The hub cache folder, read at call time: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ~/.cache/huggingface/hub.

    huggingface_hub reads these once, at import; reading them here lets a test or a user change them later.
    """
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _refuse(what: str, value: object, why: str) -> UnsafePathError:
    return UnsafePathError(f"refusing {what} {_shown(value)}: {why}")


def check_relative_path(value: object, what: str = "file name") -> str:
    """``value`` if it is a relative POSIX path that cannot leave the folder it is joined to."""
    if not isinstance(value, str) or not value:
        raise _refuse(what, value, "it is empty or not text")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise _refuse(what, value, "it contains a control character or NUL")
    if "\\" in value:
        raise _refuse(what, value, "it contains a backslash")
    if value.startswith("/") or _DRIVE_RE.match(value):
        raise _refuse(what, value, "it is an absolute path")
    for segment in value.split("/"):
        if segment in ("", ".", ".."):
            raise _refuse(what, value, "it has an empty, '.' or '..' segment")
        if len(segment.encode("utf-8", "surrogatepass")) > _MAX_SEGMENT_BYTES:
            raise _refuse(what, value, f"a part is longer than {_MAX_SEGMENT_BYTES} bytes")
    return value


def check_commit(value: object, source: str = "commit") -> str:
    """``value`` if it is a full 40-hex commit id (huggingface_hub's ``REGEX_COMMIT_HASH``)."""
    from huggingface_hub.file_download import REGEX_COMMIT_HASH

    if not isinstance(value, str) or not REGEX_COMMIT_HASH.fullmatch(value):
        raise _refuse(source, value, "not a 40-character hex commit id")
    return value


def check_blob_name(value: object) -> str:
    """``value`` if it is a SHA-256 (LFS files) or git SHA-1 (small files) in lower-case hex."""
    if not isinstance(value, str) or not (SHA256_RE.match(value) or SHA1_RE.match(value)):
        raise _refuse("blob name", value, "not a SHA-256 or SHA-1 hex digest")
    return value


def check_etag(value: object, source: str = "ETag") -> str:
    """``value`` if it is a content hash or a plain token; an ETag never becomes a path unless it is a hash.

    A token that is not a hash (some mirrors send those) is allowed: the file is
    then stored under its own SHA-256 and reported unverified. Anything with a
    separator, ``..`` or odd characters is refused.
    """
    if isinstance(value, str) and (SHA256_RE.match(value) or SHA1_RE.match(value)):
        return value
    if not isinstance(value, str) or not _TOKEN_RE.match(value) or ".." in value:
        raise _refuse(source, value, "not a content hash nor a plain token")
    return value


def repo_folder(cache_dir: Path, repo_id: str) -> Path:
    """``<cache>/models--org--name``; the repo id is checked by huggingface_hub's ``validate_repo_id``."""
    from huggingface_hub.file_download import repo_folder_name
    from huggingface_hub.utils import HFValidationError

    try:
        name = repo_folder_name(repo_id=repo_id, repo_type="model")
    except HFValidationError:
        raise _refuse("repository id", repo_id, "use org/name with letters, digits, '-', '_' or '.'") from None
    return inside(Path(cache_dir), name, "repository id")


def inside(base: Path, relative: str, what: str = "file name") -> Path:
    """``base/relative`` after checking ``relative``; its folder must resolve inside ``base``.

    The last component is not resolved: in a snapshot it is our own symlink into ``blobs``.
    A folder on the way that is a symlink leading elsewhere makes the path refused.
    """
    check_relative_path(relative, what)
    path = Path(base).joinpath(*relative.split("/"))
    real_base = Path(os.path.realpath(base))
    real_parent = Path(os.path.realpath(path.parent))
    if real_parent != real_base and real_base not in real_parent.parents:
        raise _refuse(what, relative, f"it leads outside {base}")
    return path


def check_local_dir(value: object) -> Path:
    """A ``--local-dir`` folder: non-empty, no NUL, and a folder if it exists."""
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text.strip() or "\0" in text:
        raise _refuse("local folder", value, "give a folder path")
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise _refuse("local folder", text, "it exists and is not a folder")
    return path


def repo_id_of(path: Path) -> str | None:
    """``org/name`` when ``path`` lies in a cache's ``models--org--name`` folder, else None."""
    for part in Path(path).parts:
        if m := _REPO_FOLDER_RE.match(part):
            return m.group(1).replace("--", "/", 1)
    return None


def snapshot_folder(storage: Path, commit: str) -> Path:
    """``snapshots/<commit>`` inside a repo folder."""
    return inside(storage / "snapshots", check_commit(commit))


def snapshot_file(storage: Path, commit: str, filename: str) -> Path:
    """``snapshots/<commit>/<filename>`` inside a repo folder."""
    check_commit(commit)
    return inside(storage / "snapshots", f"{commit}/{filename}")


def snapshot_files(storage: Path, commit: str, suffix: str = ".gguf") -> list[str]:
    """The names (relative POSIX paths) of the files ending in ``suffix`` in a snapshot, on disk only."""
    folder = snapshot_folder(storage, commit)
    names = []
    for parent, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(parent) / name
            if name.lower().endswith(suffix) and path.is_file():
                names.append(path.relative_to(folder).as_posix())
    return sorted(names)


def blobs_folder(storage: Path) -> Path:
    """``blobs`` inside a repo folder."""
    return storage / "blobs"


def blob_file(storage: Path, blob: str) -> Path:
    """``blobs/<hash>`` inside a repo folder."""
    return blobs_folder(storage) / check_blob_name(blob)


def incomplete_file(storage: Path, key: str) -> Path:
    """``blobs/<key>.incomplete``: a partial download (``key`` is a hash, or a name made from an ETag)."""
    if not _TOKEN_RE.match(key) or ".." in key:
        raise _refuse("partial file name", key, "not a content hash nor a plain token")
    return blobs_folder(storage) / f"{key}.incomplete"


def unverified_mark(storage: Path, blob: str) -> Path:
    """``blobs/<hash>.unverified``: present while that blob was checked by its size only."""
    return blob_file(storage, blob).with_name(f"{blob}.unverified")


def ref_file(storage: Path, revision: str) -> Path:
    """``refs/<revision>`` inside a repo folder (branch names may hold ``/``)."""
    return inside(storage / "refs", revision, "revision")


def read_ref(storage: Path, revision: str = "main") -> str:
    """The commit ``refs/<revision>`` names, checked; OSError when there is none."""
    text = ref_file(storage, revision).read_text(encoding="utf-8").strip()
    return check_commit(text, f"commit in refs/{revision}")


def lock_file(cache_dir: Path, storage: Path, key: str) -> Path:
    """``.locks/models--org--name/<key>.lock`` (huggingface_hub's lock place)."""
    check_relative_path(key, "lock name")
    return inside(Path(cache_dir) / ".locks", f"{storage.name}/{key}.lock", "lock name")


def local_file(local_dir: Path, filename: str) -> Path:
    """``<local_dir>/<filename>``; names inside ``.cache/huggingface`` are refused (that is our metadata)."""
    if filename.split("/", 2)[:2] == [".cache", "huggingface"]:
        raise _refuse("file name", filename, "it is inside the download metadata folder")
    return inside(local_dir, filename)


def local_meta_file(local_dir: Path, filename: str, suffix: str) -> Path:
    """``<local_dir>/.cache/huggingface/download/<filename><suffix>`` (``.metadata``, ``.lock``, ...)."""
    return inside(Path(local_dir) / ".cache" / "huggingface" / "download", filename + suffix)


def points_into(path: Path, folder: Path) -> bool:
    """True when ``path`` is a symlink whose target lies directly in ``folder`` (a snapshot pointer to a blob)."""
    if not path.is_symlink():
        return False
    return Path(os.path.realpath(path)).parent == Path(os.path.realpath(folder))


def is_unverified(path: Path, root: Path | None = None) -> bool:
    """True when ``path`` was downloaded without a content hash to check it against (only its size was).

    In the cache: its blob carries the ``.unverified`` mark. In a ``local_dir``
    (searched from ``path``'s folder up to ``root``): its metadata's ETag is no hash.
    Files that no download of specchat's made are not unverified: nothing is known of them.
    """
    real = Path(os.path.realpath(path))
    if real.parent.name == "blobs" and (SHA256_RE.match(real.name) or SHA1_RE.match(real.name)):
        return real.with_name(f"{real.name}.unverified").exists()
    path = Path(path)
    for base in path.parents:
        try:
            meta = local_meta_file(base, path.relative_to(base).as_posix(), ".metadata")
            lines = meta.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeError, UnsafePathError):
            lines = []
        if len(lines) >= 2:
            return not (SHA256_RE.match(lines[1]) or SHA1_RE.match(lines[1]))
        if root is not None and base == Path(root):
            break
    return False
