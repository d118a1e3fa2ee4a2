"""What a llama.cpp build and its devices are, as plain data (no llama.cpp import).

``specchat.core.llama.devices`` fills these in; the window and the terminal
show them without importing llama.cpp themselves.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

MIB = 1 << 20
GIB = 1 << 30


class DeviceType(enum.Enum):
    """ggml's ``enum ggml_backend_dev_type``, plus UNKNOWN for values added later."""

    CPU = 0
    GPU = 1
    IGPU = 2  # integrated GPU sharing host memory
    ACCEL = 3  # helps the CPU backend (BLAS, AMX); holds no layers of its own
    META = 4  # wraps several devices for tensor parallelism
    UNKNOWN = -1

    @classmethod
    def from_code(cls, code: int) -> DeviceType:
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN

    @property
    def holds_layers(self) -> bool:
        """Whether llama.cpp places offloaded layers on a device of this type."""
        return self in (DeviceType.GPU, DeviceType.IGPU)


@dataclass(frozen=True)
class BackendDevice:
    """One ggml backend device, as llama.cpp reports it."""

    name: str
    description: str
    type: DeviceType
    free_bytes: int
    total_bytes: int

    def summary(self) -> str:
        """One line such as ``CUDA0 (GPU, NVIDIA H200): 139.2/139.8 GiB free``.

        A CPU reads ``CPU (CPU, AMD EPYC): 23.5 GiB RAM``.
        """
        desc = f", {self.description}" if self.description and self.description != self.name else ""
        if not self.total_bytes:
            mem = ""
        elif self.type is DeviceType.CPU:  # ggml reports all of RAM as free for the CPU: say only the size
            mem = f": {self.total_bytes / GIB:.1f} GiB RAM"
        else:
            mem = f": {self.free_bytes / GIB:.1f}/{self.total_bytes / GIB:.1f} GiB free"
        return f"{self.name} ({self.type.name}{desc}){mem}"


@dataclass(frozen=True)
class BuildInfo:
    """What this llama.cpp build can do: for `specchat info`, the About box and bug reports."""

    llama_cpp_python: str
    offload: bool
    devices: tuple[BackendDevice, ...]
    system_info: str  # llama.cpp's feature line, e.g. "CPU : SSE3 = 1 | AVX2 = 1 | ..."

    def lines(self) -> list[str]:
        """Human-readable lines, one fact each."""
        out = [
            f"llama-cpp-python {self.llama_cpp_python}",
            "GPU offload: "
            + (
                "yes"
                if self.offload
                else "no (a CPU-only build; see the README's GPU section to build with CUDA or Metal)"
            ),
        ]
        out += [f"device: {d.summary()}" for d in self.devices] or ["device: none reported"]
        out.append(f"features: {self.system_info}")
        return out

    def to_json(self) -> dict[str, object]:
        return {
            "llama_cpp_python": self.llama_cpp_python,
            "offload": self.offload,
            "devices": [
                {
                    "name": d.name,
                    "description": d.description,
                    "type": d.type.name,
                    "free_bytes": d.free_bytes,
                    "total_bytes": d.total_bytes,
                }
                for d in self.devices
            ],
            "system_info": self.system_info,
        }
