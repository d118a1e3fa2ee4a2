"""Fixtures every test can use: isolated app dirs, no network beyond loopback, the demo pair,
a loopback fake hub and tiny GGUF files (from ``tests/support``, importable as ``support``)."""

from __future__ import annotations

import ipaddress
import os
import socket
import tempfile
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from support.gguf_files import GgufMaker
from support.hubserver import FakeHub, serve
from support.stacks import WINDOW_CALLS, CallLog, busy_threads, thread_stacks

if TYPE_CHECKING:
    from specchat.core.models.demo import DemoPair
    from specchat.core.runtime.runtime import Runtime

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"


def _is_loopback(address: object) -> bool:
    if isinstance(address, tuple) and address:
        host = address[0]
    elif isinstance(address, (str, bytes)):
        return True  # AF_UNIX path
    else:
        return False
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class NetworkBlockedError(OSError):
    pass


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _guarded_connect(self: socket.socket, address: tuple[Any, ...] | str | bytes) -> None:
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address):
        raise NetworkBlockedError(f"tests may not reach the network: {address!r}")
    return _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: tuple[Any, ...] | str | bytes) -> int:
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address):
        raise NetworkBlockedError(f"tests may not reach the network: {address!r}")
    return _real_connect_ex(self, address)


@pytest.fixture(autouse=True)
def _block_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded_connect_ex)


@pytest.fixture(autouse=True)
def app_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Point specchat's data, config and cache dirs (and the HF cache) at a temp folder."""
    dirs = {name: tmp_path / "appdirs" / name for name in ("data", "config", "cache", "hf")}
    for path in dirs.values():
        path.mkdir(parents=True)
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(dirs["data"]))
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(dirs["config"]))
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(dirs["cache"]))
    monkeypatch.setenv("HF_HOME", str(dirs["hf"]))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    return dirs


@pytest.fixture(scope="session")
def demo_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("demo-models")


@pytest.fixture(scope="session")
def demo_pair(demo_models_dir: Path) -> DemoPair:
    """The real demo pair (F32 target, Q4_1 draft), converted once per test session."""
    from specchat.core.models.demo import provision_demo_pair

    return provision_demo_pair(demo_models_dir)


@pytest.fixture(scope="session")
def demo_runtime(demo_pair: DemoPair) -> Iterator[Runtime]:
    """The demo pair loaded once per test session (2048-token context)."""
    from specchat.core.runtime.runtime import Runtime

    runtime = Runtime.load(demo_pair.target, demo_pair.draft, n_ctx=2048)
    yield runtime
    runtime.close()


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    """A threaded loopback hub; ``hub.url`` is its endpoint."""
    with serve() as state:
        yield state


@pytest.fixture
def make_gguf(tmp_path: Path) -> GgufMaker:
    """``make_gguf(name, **options)`` writes a tiny GGUF under the test's temp folder."""
    return GgufMaker(tmp_path / "ggufs")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A wait for a Qt signal or condition that ran out (pytest-qt's TimeoutError) also reports what every thread
    of the process was doing then: its share of a core and its stack. A rare slow or stuck reply says at once
    whether the engine's thread was working (slowly) or blocked, and where. A failure in a module that keeps a
    ``CALLS`` log (:class:`support.stacks.CallLog`) reports its calls too, whatever the assertion said, and a UI
    test the windows' engine shut-downs and server stops (``WINDOW_CALLS``)."""
    report = yield
    if call.excinfo is not None and call.when != "teardown":  # failed, or failed as expected (a known defect)
        from pytestqt.exceptions import TimeoutError as WaitTimeout

        if call.excinfo.errisinstance(WaitTimeout):
            report.sections.append(("threads when the wait ran out", f"{busy_threads()}\n{thread_stacks(12)}"))
        calls = getattr(getattr(item, "module", None), "CALLS", None)
        if isinstance(calls, CallLog):
            report.sections.append(("calls", str(calls)))
        if WINDOW_CALLS.lines:
            report.sections.append(("windows shut down or stopped serving", str(WINDOW_CALLS)))
    return report


_XFAILED: list[str] = []  # "test id: crash line" of each expected failure that did fail


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep why an expected failure failed: ``-ra`` prints only its reason, and a known defect's next failure
    should say what it was."""
    if report.when == "call" and hasattr(report, "wasxfail") and report.skipped:
        crash = getattr(report.longrepr, "reprcrash", None)
        if crash is not None:
            kept = [(title, text) for title, text in report.sections if not title.startswith("Captured")]
            sections = "".join(f"\n--- {title}\n{text}" for title, text in kept)
            _XFAILED.append(f"{report.nodeid}: {crash.message[:30000]}{sections}")


# A run that passes keeps no output anywhere (CI keeps it only for a failed run): each expected failure is also
# appended here, so that a known defect's rare failure leaves its message on the machine that ran it.
XFAIL_LOG = Path(tempfile.gettempdir()) / "specchat-expected-failures.log"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _XFAILED:
        terminalreporter.section("expected failures: what failed")
        for line in _XFAILED:
            terminalreporter.line(line)
        try:
            with XFAIL_LOG.open("a", encoding="utf-8") as log:
                log.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} in {Path.cwd()}\n" + "\n".join(_XFAILED) + "\n")
        except OSError as exc:
            terminalreporter.line(f"(not kept in {XFAIL_LOG}: {exc})")
        else:
            terminalreporter.line(f"(also appended to {XFAIL_LOG})")
