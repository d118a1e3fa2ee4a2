"""Every thread's Python stack, short, for the message of a test that waited in vain (where each thread was)."""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from pathlib import Path

FRAMES = 8  # the innermost frames of each thread: where it waits, and what called that


def thread_stacks(frames: int = FRAMES) -> str:
    """Each live thread's name and its innermost ``frames`` frames, one line per frame."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        stack = traceback.extract_stack(frame)[-frames:]
        lines = [f"  {s.filename.rsplit('/', 2)[-1]}:{s.lineno} {s.name}: {(s.line or '').strip()}" for s in stack]
        parts.append(f"thread {names.get(ident, ident)}:\n" + "\n".join(lines))
    return "\n".join(parts)


def _task_times() -> dict[int, tuple[str, str, int]]:
    """Each of this process's threads (native id): its name, scheduler state and CPU ticks so far (Linux)."""
    out = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # it ended meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(task.name)] = (name, fields[0], int(fields[11]) + int(fields[12]))  # state, utime + stime
    return out


def busy_threads(seconds: float = 1.0) -> str:
    """The load average, and each of this process's threads with its share of a core over the next ``seconds``
    and its state: whether a wait in vain was a thread working slowly (busy), or blocked (sleeping, 0%)."""
    if not Path("/proc/self/task").is_dir():
        return "(no /proc here)"
    names = {t.native_id: t.name for t in threading.enumerate()}
    before = _task_times()
    time.sleep(seconds)
    after = _task_times()
    tick = os.sysconf("SC_CLK_TCK")
    lines = [f"load average {os.getloadavg()}; threads of this process, share of a core over {seconds:g} s:"]
    for tid, (name, state, ticks) in sorted(after.items()):
        used = (ticks - before.get(tid, (name, state, ticks))[2]) / tick / seconds
        lines.append(f"  {names.get(tid, name)} [{tid}] {state} {used:.0%}")
    return "\n".join(lines)


class CallLog:
    """Who called what, from which thread and where: functions patched with :meth:`watch` append a line each
    time they are called (the latest ``keep``), for the message of a test that saw something cut short."""

    def __init__(self, keep: int = 40) -> None:
        self.keep = keep
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def watch(self, monkeypatch: object, owner: object, name: str, frames: int = 6) -> None:
        """Replace ``owner.name`` (through ``monkeypatch.setattr``) by a wrapper that records each call."""
        real = getattr(owner, name)
        label = f"{getattr(owner, '__name__', type(owner).__name__)}.{name}"

        def recorded(*args: object, **kwargs: object) -> object:
            stack = traceback.extract_stack()[-frames - 1 : -1]
            where = " < ".join(f"{s.filename.rsplit('/', 1)[-1]}:{s.lineno} {s.name}" for s in reversed(stack))
            line = f"{label}{f' on {id(args[0]):#x}' if args else ''} [{threading.current_thread().name}]: {where}"
            with self._lock:
                self.lines = [*self.lines[-self.keep + 1 :], line]
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, recorded)  # type: ignore[attr-defined]

    def __str__(self) -> str:
        return "calls:\n" + "\n".join(f"  {line}" for line in self.lines)


# The windows' engine shut-downs and server stops of the test running (tests/ui/conftest.py records them): a load,
# reply or served request that ends early or never says which window was closed or stopped, by whom.
WINDOW_CALLS = CallLog(keep=40)
