"""Real ``specchat serve-rpc`` processes on free loopback ports, for the remote-device tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RpcServer:
    """One ``specchat serve-rpc`` on 127.0.0.1, its output in ``log``."""

    def __init__(self, log_dir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log = log_dir / f"serve-rpc-{self.port}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "specchat", "serve-rpc", "--port", str(self.port), "--threads", "1"],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
            )
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve-rpc exited with {self.proc.returncode}: {self.log.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"serve-rpc did not listen within {timeout} s: {self.log.read_text()}")

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(timeout=10)
