"""Where specchat keeps its files (platformdirs), overridable for tests."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "specchat"


def _dir(env_var: str, default: str) -> Path:
    path = Path(os.environ.get(env_var) or default)
    path.mkdir(parents=True, exist_ok=True)
    return path


def data_dir() -> Path:
    """Conversations database and converted models (``SPECCHAT_DATA_DIR`` overrides)."""
    return _dir("SPECCHAT_DATA_DIR", platformdirs.user_data_dir(APP_NAME, appauthor=False))


def config_dir() -> Path:
    """Settings file (``SPECCHAT_CONFIG_DIR`` overrides)."""
    return _dir("SPECCHAT_CONFIG_DIR", platformdirs.user_config_dir(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    """Rebuildable caches such as the GGUF metadata index (``SPECCHAT_CACHE_DIR`` overrides)."""
    return _dir("SPECCHAT_CACHE_DIR", platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def models_dir() -> Path:
    """The app's own models folder, inside the data directory."""
    path = data_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def resources_dir() -> Path:
    """Bundled resources: ``specchat/resources`` in a wheel or a frozen build, ``resources/`` in a checkout.

    The source of truth is the top-level ``resources/`` folder; pyproject.toml maps it onto the
    ``specchat.resources`` package, so an installed copy carries it inside the package.
    """
    import sys

    frozen_root = getattr(sys, "_MEIPASS", None)
    if frozen_root:
        return Path(frozen_root) / "specchat" / "resources"
    here = Path(__file__).resolve().parents[1]
    installed = here / "resources"
    return installed if installed.is_dir() else here.parent / "resources"


def not_a_file(path: Path) -> str | None:
    """Why ``path`` is no regular file to open (following symlinks), or None when it is one.

    Checked before opening: opening a FIFO waits for a writer, and a device never ends.
    "not found" when nothing is there; otherwise what is there, e.g. "a FIFO (named pipe)".
    None too when the check itself fails (no permission): opening the file then says why.
    """
    import errno
    import stat

    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "not found"
    except OSError as exc:
        return "a symlink loop" if exc.errno == errno.ELOOP else None
    except ValueError:  # a NUL in the name: opening says so
        return None
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"
