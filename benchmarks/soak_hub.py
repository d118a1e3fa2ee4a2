"""The soak's hub and attachment actions: the loopback hub the parent serves and the picker the child drives.

The parent serves the tests' loopback hub (``tests/support/hubserver.py``), stocked with the tiny GGUF
repositories of ``tests/support/hub_models.py``, and points the child at it (``HF_ENDPOINT``, a hub cache of
its own). The child opens File → Choose models… on the real window, types a search on the "Search the hub"
tab, opens a repository, picks a quantisation and downloads it with progress, sometimes cancelling after the
first progress and resuming, then closes the dialog. The parent checks every downloaded file against what the
hub served and that each cancelled download resumed from the part received.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "tests"))  # the loopback hub and its stock (support/hubserver.py, hub_models.py)

from support.hub_models import DRAFT_REPO, TARGET_REPO  # noqa: E402

if TYPE_CHECKING:
    from PySide6.QtCore import SignalInstance

    from specchat.ui.main_window import MainWindow
    from support.hubserver import FakeHub

THROTTLE = 0.004  # seconds per 8 KiB of a file body: a download lasts long enough to show progress and be cancelled

# (repository, quantisation, cancel after the first progress and resume): one per hub action, in turn
PLAN: list[tuple[str, str, bool]] = [
    (TARGET_REPO, "Q4_K_M", False),
    (TARGET_REPO, "Q8_0", True),
    (DRAFT_REPO, "Q8_0", False),
    (TARGET_REPO, "F16", True),  # two parts
]

ATTACHMENTS = {
    "notes.md": "# Notes\nThe meeting moved to Thursday at 10.\nBring the budget sheet.\n",
    "prices.csv": "item,price\ntea,2.50\ncoffee,3.10\ncake,4.00\n",
    "reverse.py": "def reverse(text: str) -> str:\n    return text[::-1]\n",
}


def write_attachments(folder: Path) -> list[Path]:
    """The small text files the soak attaches to some messages."""
    folder.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for name, text in ATTACHMENTS.items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


# --- the parent ----------------------------------------------------------------------------------------------


@dataclass
class StockedHub:
    hub: FakeHub
    files: dict[str, bytes]  # file name (without its folder) -> bytes served


@contextmanager
def serve_stocked(workdir: Path) -> Iterator[StockedHub]:
    """The loopback hub, stocked and throttled, served from a thread of this process while the child runs."""
    from support.gguf_files import GgufMaker
    from support.hub_models import stock
    from support.hubserver import serve

    with serve() as hub:
        stocked = stock(hub, GgufMaker(workdir / "hub-stock"))
        hub.throttle = THROTTLE
        yield StockedHub(hub, {Path(name).name: data for name, data in stocked.files.items()})


def hub_env(env: dict[str, str], hub: FakeHub, workdir: Path) -> None:
    """Point the child at the loopback hub, with a hub cache of its own (never the user's)."""
    env["HF_ENDPOINT"] = hub.url
    env["HF_HOME"] = str(workdir / "hf")
    env.pop("HF_HUB_CACHE", None)
    env["HF_HUB_OFFLINE"] = "0"
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"


def check_downloads(stocked: StockedHub, actions: list[dict[str, Any]]) -> list[str]:
    """One line per problem: a hub action that did not finish, a file unlike the hub's, a cancel not resumed."""
    problems: list[str] = []
    for a in actions:
        where = f"hub action {a['n']} ({a['repo']} {a['quant']})"
        if a["outcome"] != "downloaded":
            problems.append(f"{where}: {a['outcome']}: {a['status']}")
            continue
        for path in (Path(p) for p in a["paths"] if p):
            for part in _parts(path):
                served = stocked.files.get(part.name)
                if served is not None and (not part.is_file() or part.read_bytes() != served):
                    problems.append(f"{where}: {part.name} differs from the hub's file")
        if a["cancelled"]:
            resumed = [r for r in stocked.hub.gets(a["cancelled_file"]) if _resumed_from(r.range) > 0]
            if not resumed:
                problems.append(f"{where}: cancelled, but no download of {a['cancelled_file']} resumed")
    return problems


def resumed_kib(stocked: StockedHub, filename: str) -> int:
    """Where the latest resumed download of ``filename`` started, in KiB (0: none resumed)."""
    starts = [_resumed_from(r.range) for r in stocked.hub.gets(filename)]
    return max([s for s in starts if s > 0] or [0]) // 1024


def _resumed_from(range_header: str | None) -> int:
    if not range_header or not range_header.startswith("bytes="):
        return 0
    return int(range_header.removeprefix("bytes=").split("-")[0] or 0)


def _parts(path: Path) -> list[Path]:
    """A split model's first part stands for all of them (they lie side by side)."""
    if "-00001-of-" not in path.name:
        return [path]
    total = int(path.name.split("-of-")[1][:5])
    return [path.with_name(path.name.replace("-00001-of-", f"-{i:05d}-of-")) for i in range(1, total + 1)]


# --- the child -----------------------------------------------------------------------------------------------


def wait_first(signals: list[SignalInstance], timeout_ms: int = 300_000) -> tuple[int, list[object]]:
    """Run the event loop until one of ``signals`` is emitted; which one (its index) and its arguments."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    got: list[tuple[int, list[object]]] = []
    slots: list[tuple[SignalInstance, Callable[..., None]]] = []
    for i, signal in enumerate(signals):

        def slot(*args: object, i: int = i) -> None:
            got.append((i, list(args)))
            loop.quit()

        signal.connect(slot)
        slots.append((signal, slot))
    QTimer.singleShot(timeout_ms, loop.quit)
    if not got:
        loop.exec()
    for signal, slot in slots:
        signal.disconnect(slot)
    if not got:
        raise SystemExit(f"timed out waiting for {signals}")
    return got[0]


def hub_action(window: MainWindow, n: int) -> dict[str, Any]:
    """The picker from the File menu's action, a search, a repository's files, a download (cancelled after its
    first progress and resumed, as the plan says) and Cancel; what happened, for the parent to check."""
    from PySide6.QtCore import QCoreApplication, QEvent, QTimer
    from PySide6.QtTest import QTest

    from support.qt_items import tree_row

    repo, quant, cancel = PLAN[n % len(PLAN)]
    started = time.monotonic()
    dialog = window.dialogs.model_picker()
    opened = round(time.monotonic() - started, 2)  # on the GUI thread: the window answers nothing meanwhile
    tab = dialog.hub_tab
    dialog.tabs.setCurrentWidget(tab)
    record: dict[str, Any] = {"n": n, "repo": repo, "quant": quant, "cancelled": False, "progress_steps": 0}
    record["opened_s"] = opened

    def finish(outcome: str) -> dict[str, Any]:
        record.update(outcome=outcome, status=tab.status.text(), seconds=round(time.monotonic() - started, 2))
        dialog.reject()  # the dialog's Cancel: nothing loads
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        return record

    QTest.keyClicks(tab.query, "tiny")  # typing: the search runs after a pause
    wait_first([tab.searched])
    rows = {tree_row(tab.results, i).text(0): tree_row(tab.results, i) for i in range(tab.results.topLevelItemCount())}
    record["search"] = tab.search_status.text()
    if repo not in rows:
        return finish("not found")
    tab.results.setCurrentItem(rows[repo])
    wait_first([tab.listed])
    if tab.draft_line.text().startswith("Looking for the draft"):
        wait_first([tab.offered])
    files = {tree_row(tab.files, i).text(0): tree_row(tab.files, i) for i in range(tab.files.topLevelItemCount())}
    record["listed"] = sorted(files)
    if quant not in files:
        return finish("not listed")
    tab.files.setCurrentItem(files[quant])
    record["button"] = tab.download_button.text()
    record["verdict"] = files[quant].text(tab.VERDICT_COLUMN)

    steps: list[int] = []

    def cancel_now() -> None:
        # "Downloading target Tiny-1B-Q8_0.gguf, 8.0 KB of 2.0 MB": the file whose part is kept
        record["cancelled_file"] = tab.status.text().split(", ")[0].rsplit(" ", 1)[-1]
        tab.cancel_button.click()

    def progressed(value: int) -> None:
        steps.append(value)
        if cancel and "cancelled_file" not in record and 0 < value < tab.progress.maximum():
            record["cancelled_file"] = ""
            QTimer.singleShot(0, cancel_now)  # after the status line names the file

    tab.progress.valueChanged.connect(progressed)
    tab.download_button.click()
    which, args = wait_first([tab.pair_downloaded, tab.download_failed])
    if which == 1 and "cancelled" in str(args[0]):
        record["cancelled"] = True
        record["cancel_line"] = str(args[0])
        tab.download_button.click()  # Download resumes the part received
        which, args = wait_first([tab.pair_downloaded, tab.download_failed])
    tab.progress.valueChanged.disconnect(progressed)
    record["progress_steps"] = len(set(steps))
    if which == 1:
        return finish("failed")
    record["paths"] = [str(a) for a in args]
    record["fields"] = [dialog.target_field.path, dialog.draft_field.path]
    return finish("downloaded" if record["fields"] == record["paths"] else "not in the Files tab")
