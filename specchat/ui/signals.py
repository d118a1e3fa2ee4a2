"""Emitting Qt signals from Python without losing references to ``True``.

PySide6 6.12 with CPython 3.11 returns the bool result of ``SignalInstance.emit``
without a new reference, so every emit takes one reference from ``True``; after
a few thousand emits (a long reply, a model load's progress) CPython aborts with
"bool_dealloc". ``emit`` gives that reference back, but only when a probe at
import shows the bug, so a fixed PySide6 (or immortal bools) changes nothing.
"""

from __future__ import annotations

import ctypes
import sys

from PySide6.QtCore import QObject, Signal, SignalInstance

_PROBES = 64


class _Probe(QObject):
    ping = Signal()


def _emit_loses_references() -> bool:
    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(_PROBES):
        probe.ping.emit()
    lost = before - sys.getrefcount(True)
    if lost >= _PROBES // 2:
        for _ in range(lost):
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(True))
        return True
    return False


EMIT_LOSES_REFERENCES = _emit_loses_references()


def emit(signal: SignalInstance, *args: object) -> None:
    """``signal.emit(*args)``, repairing the result's reference count where PySide6 drops it."""
    result = signal.emit(*args)
    if EMIT_LOSES_REFERENCES and isinstance(result, bool):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(result))
