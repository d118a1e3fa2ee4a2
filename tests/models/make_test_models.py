"""Regenerate the random-weight test models in this folder (never run by the tests or CI).

The models come from llama.cpp's own ``test-llama-archs`` tool, built once
from the llama-cpp-python sdist that is installed (its vendored llama.cpp,
so the files match the llama.cpp the app runs on). For each architecture:

* ``ARCH.gguf``: the target, seed ``--seed``, F16;
* ``ARCH-q8.gguf``: the same model requantized to Q8_0 (a draft whose drafts are almost all accepted);
* ``ARCH-seedN-q8.gguf``: another seed, Q8_0 (a draft whose drafts are almost all rejected);

and ``qwen35-mtp.gguf``: a Qwen3.5 target with one MTP (NextN) layer. The
tool writes no MTP layer, so the script patches it (one environment
variable adds the layer, the ``nextn_predict_layers`` key and
``load_mtp``), then fixes the saved ``recurrent_layers`` array, which has
one entry per trunk layer only, with the gguf package.

    python tests/models/make_test_models.py [--seed 1] [--draft-seed 2] [--archs llama,qwen35,...]

The build takes about 15 minutes on 2 cores; ``--source DIR`` uses an
unpacked sdist instead of downloading one, ``--work DIR`` keeps the build
between runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for support.gguf_copy

DEFAULT_ARCHS = "llama,qwen35,lfm2,granitehybrid,mamba2"
NEXTN_ENV = "SPECCHAT_NEXTN_LAYERS"
TOOL = "test-llama-archs"
FTYPE_F16 = 1
FTYPE_Q8_0 = 7

# (anchor, replacement) pairs applied to tests/test-llama-archs.cpp; each anchor must occur exactly once.
PATCH = [
    ("#include <cinttypes>\n", "#include <cinttypes>\n#include <cstdlib>\n"),
    (
        "    ms.add_kv(LLM_KV_BLOCK_COUNT,               n_layer);\n",
        "    // specchat: SPECCHAT_NEXTN_LAYERS=n appends n MTP (NextN) blocks after the trunk\n"
        '    const uint32_t n_nextn = getenv("SPECCHAT_NEXTN_LAYERS") ? '
        '(uint32_t) atoi(getenv("SPECCHAT_NEXTN_LAYERS")) : 0;\n'
        "    ms.add_kv(LLM_KV_BLOCK_COUNT,               n_layer + n_nextn);\n"
        "    if (n_nextn > 0) {\n"
        "        ms.add_kv(LLM_KV_NEXTN_PREDICT_LAYERS, n_nextn);\n"
        "    }\n",
    ),
    (
        "    model_params.split_mode = split_mode;\n",
        "    model_params.split_mode = split_mode;\n"
        '    model_params.load_mtp = getenv("SPECCHAT_NEXTN_LAYERS") != nullptr; // specchat: keep the MTP tensors\n',
    ),
]


def run(cmd: list[str], **kwargs: object) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]


def installed_version() -> str:
    import llama_cpp

    return llama_cpp.__version__


def fetch_source(version: str, work: Path) -> Path:
    """Download and unpack the llama-cpp-python sdist of ``version``; return its root."""
    root = work / f"llama_cpp_python-{version}"
    if root.exists():
        return root
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-binary",
            ":all:",
            "--no-deps",
            f"llama-cpp-python=={version}",
            "-d",
            str(work),
        ]
    )
    sdist = work / f"llama_cpp_python-{version}.tar.gz"
    with tarfile.open(sdist) as tar:
        tar.extractall(work, filter="data")
    return root


def patch_tool(llama_cpp_dir: Path) -> None:
    source = llama_cpp_dir / "tests" / f"{TOOL}.cpp"
    text = source.read_text()
    if NEXTN_ENV in text:
        return
    for anchor, replacement in PATCH:
        if text.count(anchor) != 1:
            sys.exit(f"make_test_models: {source} changed; cannot find the line to patch: {anchor.strip()!r}")
        text = text.replace(anchor, replacement)
    source.write_text(text)


def build_tool(llama_cpp_dir: Path, build: Path, jobs: int) -> Path:
    patch_tool(llama_cpp_dir)
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    if not (build / "CMakeCache.txt").exists():
        run(
            [
                "cmake",
                "-S",
                str(llama_cpp_dir),
                "-B",
                str(build),
                *generator,
                "-DCMAKE_BUILD_TYPE=Release",
                "-DLLAMA_BUILD_TESTS=ON",
                "-DLLAMA_BUILD_COMMON=ON",
                "-DLLAMA_BUILD_TOOLS=OFF",
                "-DLLAMA_BUILD_EXAMPLES=OFF",
                "-DLLAMA_BUILD_SERVER=OFF",
                "-DLLAMA_BUILD_APP=OFF",
                "-DLLAMA_OPENSSL=OFF",
                "-DLLAMA_CURL=OFF",
                "-DGGML_NATIVE=OFF",
                "-DBUILD_SHARED_LIBS=OFF",
            ]
        )
    run(["nice", "-n", "10", "cmake", "--build", str(build), "--target", TOOL, f"-j{jobs}"])
    return build / "bin" / TOOL


def generate(tool: Path, arch: str, seed: int, work: Path, *, nextn: int = 0) -> Path:
    """Run the tool for one architecture; return the dense model it wrote."""
    out = Path(tempfile.mkdtemp(prefix=f"{arch}-{seed}-", dir=work))
    env = {**os.environ}
    env.pop(NEXTN_ENV, None)
    if nextn:
        env[NEXTN_ENV] = str(nextn)
    run([str(tool), "-a", f"^{arch}$", "-s", str(seed), "-o", str(out)], env=env, stdout=subprocess.DEVNULL)
    path = out / f"{arch}-dense.gguf"
    if not path.exists():
        sys.exit(f"make_test_models: {tool.name} wrote no {path.name} (does this llama.cpp know '{arch}'?)")
    return path


def quantize(src: Path, dst: Path, ftype: int) -> None:
    import llama_cpp

    from specchat.core.llama.model import ensure_backend

    ensure_backend()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params) != 0:
        sys.exit(f"make_test_models: could not quantize {src} to {dst.name}")


def fix_nextn(src: Path, dst: Path, arch: str, nextn: int) -> None:
    """Make the saved MTP model load like a published one.

    ``{arch}.attention.recurrent_layers`` gets an entry (0: not recurrent) for
    each NextN block, and the NextN blocks lose the per-tensor ``.scale`` and
    ``.input_scale`` tensors the tool gives every layer (FP8-style extras no
    MTP GGUF carries, which llama.cpp does not count as skipped when it loads
    the trunk alone, so such a file would only load with ``load_mtp``).
    """
    import gguf

    from support.gguf_copy import copy_gguf

    key = f"{arch}.attention.recurrent_layers"
    n_layer = int(gguf.GGUFReader(src).fields[f"{arch}.block_count"].contents())
    nextn_blocks = tuple(f"blk.{i}." for i in range(n_layer - nextn, n_layer))

    def edit(name: str, value: object) -> object:
        return [*value, *([0] * nextn)] if name == key else value  # type: ignore[misc]

    def keep(name: str) -> bool:
        return not (name.startswith(nextn_blocks) and name.endswith((".scale", ".input_scale")))

    copy_gguf(src, dst, edit=edit, keep_tensor=keep)


def check_mtp(path: Path, nextn: int) -> None:
    """Load the MTP model with its heads (``load_mtp``) and without, and check llama.cpp sees the heads."""
    import llama_cpp

    from specchat.core.llama.model import ensure_backend

    ensure_backend()
    for load_mtp in (True, False):
        params = llama_cpp.llama_model_default_params()
        params.load_mtp = load_mtp
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not model:
            sys.exit(f"make_test_models: llama.cpp cannot load {path} (load_mtp={load_mtp})")
        try:
            got = llama_cpp.llama_model_n_layer_nextn(model)
            if got != nextn or not llama_cpp.llama_model_is_hybrid(model):
                sys.exit(f"make_test_models: {path.name} has {got} NextN layers, expected {nextn}")
        finally:
            llama_cpp.llama_model_free(model)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1, help="seed of the targets (default 1)")
    parser.add_argument("--draft-seed", type=int, default=2, help="seed of the rejected drafts (default 2)")
    parser.add_argument("--archs", default=DEFAULT_ARCHS, help=f"comma-separated (default {DEFAULT_ARCHS})")
    parser.add_argument("--mtp-arch", default="qwen35", help="architecture of the MTP model ('' for none)")
    parser.add_argument("--out", type=Path, default=HERE, help="where the models go (default: this folder)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "specchat-test-models")
    parser.add_argument("--source", type=Path, help="an unpacked llama-cpp-python sdist (skips the download)")
    parser.add_argument("--version", default=None, help="llama-cpp-python version (default: the installed one)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)

    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    source = args.source or fetch_source(args.version or installed_version(), args.work)
    tool = build_tool(source / "vendor" / "llama.cpp", args.work / "build", args.jobs)

    for arch in filter(None, args.archs.split(",")):
        target = generate(tool, arch, args.seed, args.work)
        quantize(target, args.out / f"{arch}.gguf", FTYPE_F16)
        quantize(target, args.out / f"{arch}-q8.gguf", FTYPE_Q8_0)
        other = generate(tool, arch, args.draft_seed, args.work)
        quantize(other, args.out / f"{arch}-seed{args.draft_seed}-q8.gguf", FTYPE_Q8_0)
    if args.mtp_arch:
        raw = generate(tool, args.mtp_arch, args.seed, args.work, nextn=1)
        fixed = raw.with_name(f"{args.mtp_arch}-mtp-f32.gguf")
        fix_nextn(raw, fixed, args.mtp_arch, 1)
        dst = args.out / f"{args.mtp_arch}-mtp.gguf"
        quantize(fixed, dst, FTYPE_F16)
        check_mtp(dst, 1)
    for path in sorted(args.out.glob("*.gguf")):
        print(f"{path.name:32} {path.stat().st_size / 1e6:6.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
