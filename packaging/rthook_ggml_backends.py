"""PyInstaller runtime hook: register llama.cpp's dynamically loaded backends at start-up.

The bundled llama.cpp is built with GGML_BACKEND_DL=ON and GGML_CPU_ALL_VARIANTS=ON,
so the CPU backend is one plugin per CPU family in llama_cpp/lib and none is
registered until asked for. This picks the best one for the running CPU (and
any GPU plugin shipped beside it) before specchat loads a model.
"""

import sys

try:
    from specchat.core.llama.devices import load_dynamic_backends
    from specchat.core.llama.model import ensure_backend

    ensure_backend()  # quiets llama.cpp's own log first, then loads the plugins
    if load_dynamic_backends() == 0:
        print("specchat: no llama.cpp backend could be loaded from the bundle", file=sys.stderr)
except Exception as exc:  # noqa: BLE001 - never stop the app from starting; model loading will report too
    print(f"specchat: loading llama.cpp backends failed: {exc!r}", file=sys.stderr)
