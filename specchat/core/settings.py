"""Typed user settings, saved as JSON in the config directory.

Loading never fails: a missing file gives the defaults, and a bad file or an
odd value falls back to the default field by field, with a logged warning.
Beside the window's fields the file holds sections (:data:`SECTIONS`): the
remote servers (:func:`load_servers`, :func:`save_servers`), kept by
:func:`read_section` and :func:`write_section`; saving the settings keeps them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat.core import paths
from specchat.core.engine.registry import drafter_entry
from specchat.core.jsonfile import UnreadableFileError, read_json
from specchat.core.remote import MAX_SERVERS, parse_servers
from specchat.core.types import (
    DEFAULT_DEPTH,
    GPU_LAYERS_AUTO,
    MAX_DEPTH,
    DrafterKind,
    GpuLayers,
    SpecchatError,
    parse_gpu_layers,
)

log = logging.getLogger(__name__)

SETTINGS_FILENAME = "settings.json"
MIN_CONTEXT = 256
MAX_CONTEXT = 1 << 20
THEMES = ("system", "light", "dark")
MAX_API_KEY = 256
MAX_SERVE_PARALLEL = 16  # served requests decoding at once from the window (each holds a context's worth of cache)
DEFAULT_SERVE_PARALLEL = 2
_SECRETS = frozenset({"serve_api_key"})  # never written to the log
REMOTE_SECTION = "remote"
"""The section holding the saved remote servers and what a Test found free on them."""
SECTIONS = (REMOTE_SECTION,)
"""Top-level keys of settings.json beside the window's fields (``remote``: the saved remote servers)."""


@dataclass(frozen=True)
class Limit:
    """The finite range a number given on the command line must fall in."""

    label: str
    low: float
    high: float
    integer: bool = False

    def check(self, value: float) -> float:
        """Return ``value``, or raise a one-line SpecchatError saying what is allowed."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SpecchatError(f"{self.label} must be a finite number, got {value!r}")
        if self.integer and not float(value).is_integer():
            raise SpecchatError(f"{self.label} must be a whole number, got {value!r}")
        if not self.low <= value <= self.high:
            raise SpecchatError(
                f"{self.label} must be between {_plain(self.low)} and {_plain(self.high)}, got {value!r}"
            )
        return value


def _plain(x: float) -> str:
    """``4294967295`` rather than ``4.29497e+09``; ``0.5`` as it is."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


# Terminal flags by their argparse names. The window's own settings below keep narrower ranges where
# its controls do (temperature 0-5 in both).
FLAG_LIMITS: dict[str, Limit] = {
    "temperature": Limit("temperature", 0.0, 5.0),
    "top_k": Limit("top-k", 0, 100_000, integer=True),
    "top_p": Limit("top-p", 0.0, 1.0),
    "min_p": Limit("min-p", 0.0, 1.0),
    "repeat_penalty": Limit("repeat penalty", 0.0, 10.0),
    "seed": Limit("seed", 0, 2**32 - 1, integer=True),  # llama.cpp keeps seeds as uint32
    "max_tokens": Limit("max tokens", 1, 1 << 24, integer=True),
    "ctx": Limit("context size", MIN_CONTEXT, MAX_CONTEXT, integer=True),
    "threads": Limit("threads", 1, 1024, integer=True),
    "draft_p_min": Limit("draft p-min", 0.0, 1.0),
    "n_ctx": Limit("context size", 1, MAX_CONTEXT, integer=True),
    "limit": Limit("limit", 1, 1_000_000, integer=True),
}


@dataclass
class Settings:
    """Everything the app remembers between runs."""

    last_target: str = ""
    last_draft: str = ""
    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    # A mild penalty keeps small models out of loops; it shapes the target's and the draft's
    # distributions alike, so speculation stays exact.
    repeat_penalty: float = 1.1
    max_tokens: int = 512
    depth: int | None = DEFAULT_DEPTH  # None = auto (adaptive)
    # Automatic (lookup + draft model) where a draft model is loaded: docs/benchmarks.md has why; the
    # window falls back to n-gram lookup without one, and preselects a target's own MTP heads.
    drafter: str = DrafterKind.COMPOSITE  # a name in specchat.core.engine.registry.DRAFTERS
    # The composite drafter's lookup also searches the saved conversations (kept in a file next to them).
    # Off by default: it keeps what the user wrote and got.
    lookup_memory: bool = False
    # While the composer holds text and no reply runs, its prompt is read into the models' contexts, so that
    # Send reads only what changed since (docs/gui.md, "Reading the prompt while you type").
    read_ahead: bool = True
    hide_rejected: bool = False
    show_verdicts: bool = False  # the chat view's raw verdict view instead of rendered Markdown
    theme: str = "system"
    n_ctx: int = 4096
    # when the build can offload: "auto" fits free memory, -1 all, 0 none
    target_gpu_layers: GpuLayers = GPU_LAYERS_AUTO
    draft_gpu_layers: GpuLayers = GPU_LAYERS_AUTO
    window_geometry: str = ""  # base64 of QWidget.saveGeometry()
    splitter_state: str = ""
    sidebar_visible: bool = True
    panel_visible: bool = True  # the Speculation and stats panel
    zoom: int = 0  # text size steps of one point from the default
    system_prompt: str = ""  # for new conversations
    last_conversation: int = 0  # reopened on start (0: none)
    baselines: dict[str, Any] = field(default_factory=dict)  # baseline key -> Baseline.to_json()
    presets: dict[str, Any] = field(default_factory=dict)  # the user's sampler presets: name -> values
    # File → Serve on localhost…: the port, whether requests need the key, and the key itself (kept while
    # unused too, so an editor configured with it once keeps working).
    serve_port: int = 8080  # as `specchat serve`
    serve_require_key: bool = False
    serve_api_key: str = ""
    # Served requests that decode at once, in one batch with the window's own reply (1: one at a time, and the
    # window's reply waits for them); each holds a context's worth of KV cache.
    serve_parallel: int = DEFAULT_SERVE_PARALLEL

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["drafter"] = _name(self.drafter)
        return data


def _check(name: str, value: Any) -> Any:
    """Return ``value`` converted for field ``name``, or raise ValueError/TypeError."""
    if name in ("last_target", "last_draft", "window_geometry", "splitter_state", "system_prompt"):
        if not isinstance(value, str):
            raise TypeError("expected a string")
        return value
    if name == "temperature":
        return _number(value, 0.0, 5.0)
    if name == "top_p":
        v = _number(value, 0.0, 1.0)
        if v == 0.0:
            raise ValueError("must be above 0")
        return v
    if name == "repeat_penalty":
        return _number(value, 1.0, 2.0)
    if name == "top_k":
        return int(_number(value, 0, 100_000, integer=True))
    if name == "max_tokens":
        return int(_number(value, 1, 1_000_000, integer=True))
    if name == "n_ctx":
        return int(_number(value, MIN_CONTEXT, MAX_CONTEXT, integer=True))
    if name in ("target_gpu_layers", "draft_gpu_layers"):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, (str, int)):
            raise TypeError("expected a number or 'auto'")
        try:
            return parse_gpu_layers(value)
        except SpecchatError as exc:
            raise ValueError(str(exc)) from None
    if name == "depth":
        if value is None or value == "auto":
            return None
        return int(_number(value, 0, MAX_DEPTH, integer=True))
    if name == "drafter":
        if not isinstance(value, str):
            raise TypeError("expected a drafter's name")
        try:
            return drafter_entry(value).name
        except SpecchatError as exc:
            raise ValueError(str(exc)) from None
    if name in ("zoom", "last_conversation"):
        return int(_number(value, -100, 1 << 62, integer=True))
    if name == "serve_port":
        return int(_number(value, 1, 65535, integer=True))
    if name == "serve_parallel":
        return int(_number(value, 1, MAX_SERVE_PARALLEL, integer=True))
    if name == "serve_api_key":
        if not isinstance(value, str):
            raise TypeError("expected a string")
        return check_api_key(value) if value else value
    if name in (
        "hide_rejected",
        "show_verdicts",
        "sidebar_visible",
        "panel_visible",
        "lookup_memory",
        "read_ahead",
        "serve_require_key",
    ):
        if not isinstance(value, bool):
            raise TypeError("expected true or false")
        return value
    if name == "theme":
        if value not in THEMES:
            raise ValueError(f"expected one of {', '.join(THEMES)}")
        return value
    if name in ("baselines", "presets"):  # each entry is checked where it is used (chat/presets.py for presets)
        if not isinstance(value, dict):
            raise TypeError("expected an object")
        return {str(k): v for k, v in value.items() if isinstance(v, dict)}  # older plain numbers are dropped
    raise KeyError(name)


_API_KEY = re.compile(r"[!-~]+")  # printable ASCII, no spaces: sendable in a header


def check_api_key(key: str) -> str:
    """``key`` if a client can send it as ``Authorization: Bearer KEY``, else a one-line SpecchatError."""
    if not key:
        raise SpecchatError("the API key is empty")
    if len(key) > MAX_API_KEY:
        raise SpecchatError(f"the API key is {len(key)} characters long; at most {MAX_API_KEY}")
    if not _API_KEY.fullmatch(key):
        raise SpecchatError("the API key may hold only printable ASCII characters, no spaces")
    return key


def _number(value: Any, low: float, high: float, *, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("expected a number")
    if integer and not float(value).is_integer():
        raise ValueError("expected a whole number")
    if not low <= value <= high:
        raise ValueError(f"out of range {low}..{high}")
    return value


def settings_path() -> Path:
    return paths.config_dir() / SETTINGS_FILENAME


def load_settings(path: Path | None = None) -> Settings:
    """Read settings from ``path`` (default: the config dir), falling back field by field."""
    path = path or settings_path()
    settings = Settings()
    try:
        raw = read_json(path)
    except FileNotFoundError:
        return settings
    except UnreadableFileError as exc:
        log.warning("settings file unreadable: %s; using defaults", exc)
        return settings
    if not isinstance(raw, dict):
        log.warning("settings file %s does not hold an object; using defaults", path)
        return settings
    known = {f.name for f in dataclasses.fields(Settings)}
    for name, value in raw.items():
        if name in SECTIONS:
            continue
        if name not in known:
            log.warning("settings file %s: ignoring unknown key %r", path, name)
            continue
        try:
            setattr(settings, name, _check(name, value))
        except (TypeError, ValueError, SpecchatError) as exc:
            shown = "(not shown)" if name in _SECRETS else repr(value)
            log.warning("settings file %s: %s=%s is invalid (%s); using the default", path, name, shown, exc)
    return settings


def save_settings(settings: Settings, path: Path | None = None) -> None:
    """Write settings atomically (temp file, then rename), keeping the sections other modules own."""
    path = path or settings_path()
    data = settings.to_json()
    data.update({k: v for k, v in _sections(path).items() if k not in data})
    _write(path, data)


def read_section(name: str, path: Path | None = None) -> Any:
    """Section ``name`` of settings.json (None if absent); UnreadableFileError for a file that is not JSON."""
    try:
        raw = read_json(path or settings_path())
    except FileNotFoundError:
        return None
    return raw.get(name) if isinstance(raw, dict) else None


def write_section(name: str, value: Any, path: Path | None = None) -> None:
    """Replace section ``name`` of settings.json (atomically), leaving every other key as it is.

    A file that cannot be read as JSON is replaced by one holding the section only (the settings in it were
    already lost: loading falls back to the defaults).
    """
    if name not in SECTIONS:
        raise ValueError(f"{name!r} is not a settings section")
    path = path or settings_path()
    try:
        raw = read_json(path)
    except (FileNotFoundError, UnreadableFileError):
        raw = {}
    data = dict(raw) if isinstance(raw, dict) else {}
    data[name] = value
    _write(path, data)


def _sections(path: Path) -> dict[str, Any]:
    try:
        raw = read_json(path)
    except (FileNotFoundError, UnreadableFileError):
        return {}
    return {k: v for k, v in raw.items() if k in SECTIONS} if isinstance(raw, dict) else {}


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def _name(drafter: str) -> str:
    """A drafter's name as plain text (a DrafterKind member's value)."""
    return drafter_entry(drafter).key


# --- the window's remote servers (settings.json section ``remote``) -------------------------------

LEGACY_FILENAME = "remote-devices.json"
"""Where the list was kept before it moved into settings.json; read once, then removed."""


def servers_path() -> Path:
    """The file holding the window's list of remote servers (settings.json)."""
    return settings_path()


def _remote_section(path: Path | None) -> dict[str, object]:
    """The saved section (migrating the old file beside settings.json on first use); {} if unreadable."""
    path = path or servers_path()
    try:
        found = read_section(REMOTE_SECTION, path)
    except UnreadableFileError as exc:
        log.warning("remote servers unreadable: %s; using none", exc)
        return {}
    if found is None:
        found = _migrate(path)
    return found if isinstance(found, dict) else {}


def _migrate(path: Path) -> object:
    legacy = path.with_name(LEGACY_FILENAME)
    try:
        found = read_json(legacy)
    except FileNotFoundError:
        return None
    except UnreadableFileError as exc:
        log.warning("remote servers file unreadable: %s; using none", exc)
        return None
    try:
        write_section(REMOTE_SECTION, found, path)
        legacy.unlink()
    except OSError as exc:  # keep working from the old file until it can move
        log.warning("could not move %s into %s: %s", legacy, path, exc)
    return found


def load_servers(path: Path | None = None) -> tuple[str, ...]:
    """The saved servers; an unreadable file or entry is skipped (logged), never fatal."""
    path = path or servers_path()
    items = _remote_section(path).get("servers", [])
    servers: list[str] = []
    for item in items if isinstance(items, list) else []:
        try:
            servers.extend(s for s in parse_servers(str(item)) if s not in servers)
        except SpecchatError as exc:
            log.warning("remote servers in %s: %s; skipped", path, exc)
    return tuple(servers[:MAX_SERVERS])


def save_servers(servers: Iterable[str], path: Path | None = None, *, free: dict[str, int] | None = None) -> None:
    """Save the list (settings.json is replaced atomically: a crash leaves the old file or the new one).

    ``free`` adds what a Test found free on each server (bytes); figures for
    servers still listed are kept from before.
    """
    servers = list(servers)
    known = {s: n for s, n in saved_free(path).items() if s in servers}
    known.update({s: int(n) for s, n in (free or {}).items() if s in servers})
    write_section(REMOTE_SECTION, {"servers": servers, "free_bytes": known}, path or servers_path())


def saved_free(path: Path | None = None) -> dict[str, int]:
    """Free bytes per server as the latest Test found them (for the fit verdict before loading)."""
    found = _remote_section(path).get("free_bytes", {})
    if not isinstance(found, dict):
        return {}
    return {str(s): int(n) for s, n in found.items() if isinstance(n, int) and not isinstance(n, bool) and n >= 0}
