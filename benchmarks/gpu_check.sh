#!/usr/bin/env bash
# GPU check for specchat on a machine with an NVIDIA GPU and a fresh checkout.
#
#   benchmarks/gpu_check.sh                 # from the repository root
#   OUT=/some/dir benchmarks/gpu_check.sh   # also keep the results there
#
# Knobs: GPU_VENV (default /tmp/specchat-gpu-venv), DEPTHS ("auto 4 8"),
# LIMIT (first N prompts only), EXTRA_CMAKE_ARGS, MTP_MODEL (a GGUF with MTP
# heads, e.g. Unsloth's Qwen3.5-9B-MTP Q4_K_M: also benchmarks it drafting with
# its own heads, all layers on the GPU). To try the script itself
# without a GPU: SPECCHAT_PY=/path/to/venv/bin/python ALLOW_CPU=1 LIMIT=1
# (uses that environment as is: no venv, no build, no install).
#
# Builds llama-cpp-python with CUDA for the GPU it finds, installs specchat with
# the offline demo pair, checks that llama.cpp can offload, then benchmarks the
# demo pair fully offloaded: plain vs speculative tokens/s, acceptance, and
# whether greedy output was identical. Needs nvcc (CUDA toolkit with cuBLAS),
# cmake, a C++ compiler and PyPI access for the first run. See docs/gpu.md.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=${GPU_VENV:-${TMPDIR:-/tmp}/specchat-gpu-venv}
LLAMA_VERSION=${LLAMA_VERSION:-0.3.36}
DEPTHS=${DEPTHS:-"auto 4 8"}
RESULTS=${OUT:-}
LOG=$(mktemp -d)/gpu_check
mkdir -p "$LOG"
t0=$(date +%s)
step() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }

step "GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv || echo "nvidia-smi not found"
command -v nvcc >/dev/null && nvcc --version | tail -1 || echo "nvcc not on PATH: the CUDA build will fail"

if [ -n "${SPECCHAT_PY:-}" ]; then
    VPY=$SPECCHAT_PY
    step "using $VPY as is"
else
step "venv $VENV"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
VPY="$VENV/bin/python"
"$VPY" -m pip install --quiet --upgrade pip

if "$VPY" -c 'import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)' 2>/dev/null; then
    step "llama-cpp-python with GPU offload already installed in $VENV"
else
    step "building llama-cpp-python $LLAMA_VERSION with CUDA (several minutes)"
    b0=$(date +%s)
    # --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS and could hand back a CPU build.
    CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native ${EXTRA_CMAKE_ARGS:-}" \
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "$VPY" -m pip install --no-cache-dir --force-reinstall --no-deps \
        "llama-cpp-python==$LLAMA_VERSION" >"$LOG/build.log" 2>&1 \
        || { tail -40 "$LOG/build.log"; echo "gpu_check: CUDA build failed (log: $LOG/build.log)"; exit 1; }
    echo "CUDA build took $(( $(date +%s) - b0 ))s"
fi
step "installing specchat[demo]"
"$VPY" -m pip install --quiet ".[demo]"   # llama-cpp-python is already satisfied
fi

step "offload check"
ALLOW_CPU=${ALLOW_CPU:-0} "$VPY" - <<'PY'
import os
from specchat.core.llama import devices
ok = devices.offload_supported()
for d in devices.list_devices():
    print("  device:", d.summary())
print("llama_supports_gpu_offload:", ok)
if not ok and os.environ["ALLOW_CPU"] != "1":
    raise SystemExit("gpu_check: this llama.cpp build cannot offload to a GPU")
PY

SPECCHAT="$(dirname "$VPY")/specchat"
pair=$("$SPECCHAT" models demo)
TARGET=$(echo "$pair" | "$VPY" -c 'import json,sys; print(json.load(sys.stdin)["target"])')
DRAFT=$(echo "$pair" | "$VPY" -c 'import json,sys; print(json.load(sys.stdin)["draft"])')
echo "target: $TARGET"
echo "draft:  $DRAFT"

step "auto placement (the default GPU-layer setting)"
"$SPECCHAT" chat --target "$TARGET" --draft "$DRAFT" --max-tokens 8 --json "Say hi." >"$LOG/auto.json"
ALLOW_CPU=${ALLOW_CPU:-0} "$VPY" - "$LOG/auto.json" <<'PY'
import json, os, sys
placement = json.load(open(sys.argv[1]))["placement"]
print(f"  auto: target on {placement['target']}, draft on {placement['draft']}")
if placement["target"] == "CPU" and os.environ["ALLOW_CPU"] != "1":
    raise SystemExit("gpu_check: auto placement left the demo target on the CPU")
PY

step "bench: depths $DEPTHS, all layers on the GPU"
# shellcheck disable=SC2086
"$SPECCHAT" bench --target "$TARGET" --draft "$DRAFT" --prompts tests/data/prompts.jsonl \
    --depth $DEPTHS --n-gpu-layers -1 --draft-gpu-layers -1 ${LIMIT:+--limit "$LIMIT"} --json >"$LOG/bench.json"

step "results"
status=0
"$VPY" - "$LOG/bench.json" <<'PY' || status=$?
import json, sys
data = json.load(open(sys.argv[1]))
runs = data.get("runs", [data])
print(f"{'depth':>6} {'plain tok/s':>12} {'spec tok/s':>11} {'speedup':>8} {'accept':>7} {'acc/round':>9} {'identical':>9}")
for r in runs:
    print(f"{r['depth']:>6} {r['baseline_tokens_per_s']:>12.1f} {r['speculative_tokens_per_s']:>11.1f} "
          f"{r['speedup']:>8.2f} {r['acceptance_rate']:>7.2f} {r['mean_accepted_per_round']:>9.2f} {str(r['identical']):>9}")
if not all(r["identical"] for r in runs):
    print("gpu_check: greedy speculative output differed from plain decoding", file=sys.stderr)
    sys.exit(1)
PY

if [ -n "${MTP_MODEL:-}" ]; then
    step "bench: $MTP_MODEL drafting with its own MTP heads, depths $DEPTHS"
    # shellcheck disable=SC2086
    "$SPECCHAT" bench --target "$MTP_MODEL" --mtp --prompts tests/data/prompts.jsonl \
        --depth $DEPTHS --n-gpu-layers -1 ${LIMIT:+--limit "$LIMIT"} --json >"$LOG/bench_mtp.json" || status=1
    "$VPY" - "$LOG/bench_mtp.json" <<'PY' || status=$?
import json, sys
data = json.load(open(sys.argv[1]))
for r in data.get("runs", [data]):
    print(f"MTP depth {r['depth']:>5}: plain {r['baseline_tokens_per_s']:.1f} tok/s, with its heads "
          f"{r['speculative_tokens_per_s']:.1f} tok/s, x{r['speedup']:.2f}, acceptance {r['acceptance_rate']:.2f}, "
          f"identical {r['identical']}")
PY
fi

step "bench: EAGLE-3, DFlash, DFlash2 and DSpark test heads on the test targets, all layers on the GPU"
# Random-weight heads (tests/models/make_head_models.py): their drafts are rejected, so this checks that each
# head loads, follows a dense and a hybrid target on the GPU and stays lossless, not that it speeds anything up.
for target in llama qwen35; do
    for head in eagle3 dflash dflash2 dspark; do
        "$SPECCHAT" bench --target "tests/models/$target.gguf" --draft "tests/models/$head-llama.gguf" \
            --prompts tests/data/prompts.jsonl --depth 1 4 auto --n-gpu-layers -1 --draft-gpu-layers -1 \
            --limit "${LIMIT:-3}" --json >"$LOG/bench_${head}_$target.json" || { status=1; continue; }
        "$VPY" - "$LOG/bench_${head}_$target.json" "$head" "$target" <<'PY' || status=$?
import json, sys
data, head, target = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
for r in data.get("runs", [data]):
    print(f"{head:>6} on {target:<6} depth {r['depth']:>4}: plain {r['baseline_tokens_per_s']:.0f} tok/s, "
          f"head {r['speculative_tokens_per_s']:.0f} tok/s, by source {r['by_source']}, identical {r['identical']}")
PY
    done
done

if [ -n "$RESULTS" ]; then
    mkdir -p "$RESULTS"
    cp "$LOG/bench.json" "$RESULTS/gpu_bench.json"
    [ -f "$LOG/bench_mtp.json" ] && cp "$LOG/bench_mtp.json" "$RESULTS/gpu_bench_mtp.json"
    cp "$LOG"/bench_*_*.json "$RESULTS/" 2>/dev/null || true
    [ -f "$LOG/build.log" ] && tail -200 "$LOG/build.log" >"$RESULTS/gpu_build_tail.log"
    { nvidia-smi 2>/dev/null || true; "$VPY" -c 'from specchat.core.llama import devices; [print(d.summary()) for d in devices.list_devices()]'; } >"$RESULTS/gpu_devices.txt"
    echo "results written to $RESULTS"
fi
step "done"
exit $status
