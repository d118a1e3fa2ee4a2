#!/usr/bin/env bash
# Build the one-folder desktop app into dist/specchat/ (Linux).
#
#   packaging/build.sh            # venv in packaging/.venv, app in dist/specchat/
#   PKG_VENV=/tmp/pkgvenv packaging/build.sh
#
# llama-cpp-python is compiled for a portable x86-64 baseline with every CPU
# variant as a runtime-selected plugin (GGML_CPU_ALL_VARIANTS), so the bundle
# runs on CPUs other than the build machine's. That wheel is cached in
# packaging/.wheels/portable/ (about 25-40 minutes to build on 2 cores).
# Set LLAMA_CMAKE_ARGS to bundle another build (e.g. CUDA; see docs/packaging.md).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
PKG_VENV=${PKG_VENV:-packaging/.venv}
WHEELS=${WHEELS:-packaging/.wheels/portable}
LLAMA_VERSION=${LLAMA_VERSION:-0.3.36}
PYINSTALLER_VERSION=${PYINSTALLER_VERSION:-6.22.3}
# GGML_BACKEND_DIR is relative, so the CPU plugins are installed into the
# wheel's llama_cpp/lib/ (beside libggml) instead of a bin/ folder outside it.
# It must be typed :STRING: llama.cpp declares it a PATH cache entry, and CMake
# turns an untyped relative PATH into an absolute one under the build's cwd
# (the plugins then land in a temp folder and never reach the wheel).
# LLAVA_BUILD=OFF skips libmtmd (multimodal), which specchat does not use.
LLAMA_CMAKE_ARGS=${LLAMA_CMAKE_ARGS:-"-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_BACKEND_DIR:STRING=llama_cpp/lib -DLLAVA_BUILD=OFF"}

t0=$(date +%s)
step() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }

step "packaging venv: $PKG_VENV"
[ -x "$PKG_VENV/bin/python" ] || "$PY" -m venv "$PKG_VENV"
VPY="$PKG_VENV/bin/python"
"$VPY" -m pip install --quiet --upgrade pip

mkdir -p "$WHEELS"
wheel=$(ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ]; then
    step "building llama-cpp-python $LLAMA_VERSION with CMAKE_ARGS=$LLAMA_CMAKE_ARGS"
    # --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS and would hand back a native build.
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
        "$VPY" -m pip wheel --no-deps --no-cache-dir -w "$WHEELS" "llama-cpp-python==$LLAMA_VERSION"
    wheel=$(ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl | head -1)
fi
case "$LLAMA_CMAKE_ARGS" in *GGML_BACKEND_DL=ON*)
    # The backend plugins must be inside the wheel's llama_cpp/lib, or nothing can run.
    if ! "$VPY" -c 'import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
sys.exit(0 if any(n.startswith("llama_cpp/lib/libggml-cpu") for n in names) else 1)' "$wheel"; then
        echo "build.sh: $wheel has no llama_cpp/lib/libggml-cpu-* plugins; check GGML_BACKEND_DIR" >&2
        mv "$wheel" "$wheel.broken"
        exit 1
    fi
esac
step "installing $wheel, specchat[demo] and PyInstaller $PYINSTALLER_VERSION"
"$VPY" -m pip install --quiet --force-reinstall --no-deps "$wheel"
"$VPY" -m pip install --quiet ".[demo]" "pyinstaller==$PYINSTALLER_VERSION"

step "checking the bundled llama.cpp loads a backend"
"$VPY" - <<'PY'
from specchat.core.llama import devices
n = devices.load_dynamic_backends()
found = devices.list_devices()
print(f"backends registered: {n}; devices: {[d.summary() for d in found]}")
print(f"GPU offload: {devices.offload_supported()}")
assert n >= 1 and found, "no llama.cpp backend could be loaded"
PY

step "PyInstaller"
"$VPY" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath dist --workpath build/pyinstaller packaging/specchat.spec

step "checking the bundle"
dist/specchat/specchat --version
check_dir=$(mktemp -d)
pair=$(SPECCHAT_DATA_DIR="$check_dir" SPECCHAT_CACHE_DIR="$check_dir/cache" dist/specchat/specchat models demo)
target=$(echo "$pair" | "$VPY" -c 'import json,sys; print(json.load(sys.stdin)["target"])')
draft=$(echo "$pair" | "$VPY" -c 'import json,sys; print(json.load(sys.stdin)["draft"])')
SPECCHAT_DATA_DIR="$check_dir" dist/specchat/specchat chat --target "$target" --draft "$draft" \
    --max-tokens 16 --json "Say hello." | "$VPY" -c 'import json,sys; r=json.load(sys.stdin); print("frozen chat OK:", repr(r.get("text", r))[:120])'
rm -rf "$check_dir"
echo "bundle: $(du -sh dist/specchat | cut -f1) in dist/specchat/"
step "done"
