"""Cheap checks of the packaging files; building the bundle itself is packaging/build.sh."""

from __future__ import annotations

import configparser
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("size", [16, 32, 48, 64, 128, 256, 512])
def test_icon_png_sizes(size: int) -> None:
    assert png_size(PACKAGING / "icons" / f"specchat-{size}.png") == (size, size)


class CaseSensitiveParser(configparser.ConfigParser):
    """A desktop entry's keys are case-sensitive; ConfigParser lowercases them unless told not to."""

    def optionxform(self, optionstr: str) -> str:
        return optionstr


def test_desktop_entry() -> None:
    parser = CaseSensitiveParser(interpolation=None)
    parser.read(PACKAGING / "specchat.desktop", encoding="utf-8")
    entry = parser["Desktop Entry"]
    assert entry["Type"] == "Application"
    assert entry["Name"] == "specchat"
    assert entry["Exec"].split()[0] == "specchat"
    assert entry["Icon"] == "specchat"
    assert entry["Terminal"] == "false"
    assert entry["Categories"].endswith(";")


@pytest.mark.parametrize(
    "script",
    ["packaging/build.sh", "packaging/smoke_test.sh", "packaging/install-desktop.sh", "benchmarks/gpu_check.sh"],
)
def test_shell_scripts_parse_and_are_executable(script: str) -> None:
    path = ROOT / script
    assert path.stat().st_mode & 0o111, f"{script} is not executable"
    bash = shutil.which("bash")
    assert bash is not None
    subprocess.run([bash, "-n", str(path)], check=True)


def test_spec_bundles_what_the_app_needs() -> None:
    spec = (PACKAGING / "specchat.spec").read_text()
    for needle in ("llama_cpp/lib", "specchat/resources", "PySide6.QtCharts", "rthook_ggml_backends.py", "BUNDLE("):
        assert needle in spec


def test_runtime_hook_registers_a_backend() -> None:
    """The hook's call works on this build (a no-op when backends are linked in)."""
    from specchat.core.llama.devices import load_dynamic_backends

    code = compile((PACKAGING / "rthook_ggml_backends.py").read_text(), "rthook", "exec")
    exec(code, {"__name__": "rthook"})
    assert load_dynamic_backends() >= 1


def test_the_wheel_lists_every_package_and_maps_resources_into_it() -> None:
    # The standard library reads TOML from Python 3.11 (the project supports 3.10).
    tomllib = pytest.importorskip("tomllib")

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "specchat").rglob("__init__.py")}
    assert set(config["packages"]) == on_disk | {"specchat.resources"}
    assert config["package-dir"] == {"specchat.resources": "resources"}
    assert not (ROOT / "specchat" / "resources").exists()  # one source of truth, at the top level


def test_resources_are_found_from_a_checkout() -> None:
    from specchat.core import paths

    found = paths.resources_dir()
    assert (found / "catalog.json").is_file() and (found / "icons" / "specchat.svg").is_file()
