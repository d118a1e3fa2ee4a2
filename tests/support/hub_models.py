"""A small hub of real tiny GGUF models for the Hub tab: a family's target and draft, a stranger, split files.

``stock(hub, make_gguf)`` fills a :class:`~support.hubserver.FakeHub`:

* ``tiny/Tiny-1B-GGUF``: the target, in Q4_K_M (one file), Q8_0 (one file) and F16 (split in two parts),
  with a vision projector and an MTP sidecar beside them (side files, never listed as models);
* ``tiny/Tiny-100M-GGUF``: its draft, same vocabulary, Q8_0 and Q4_K_M;
* ``other/Tiny-50M-GGUF``: smaller still, but another vocabulary (never offered as the draft).

Sizes are real file sizes: the target's files are several times its draft's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from support.gguf_files import GgufMaker
from support.hubserver import FakeHub

TARGET_REPO = "tiny/Tiny-1B-GGUF"
DRAFT_REPO = "tiny/Tiny-100M-GGUF"
STRANGER_REPO = "other/Tiny-50M-GGUF"
SHAPE = {"{arch}.block_count": 2, "{arch}.embedding_length": 64, "{arch}.attention.head_count": 4}
OTHER_VOCAB = ["<s>", "</s>", "<unk>"] + [f"word{i}" for i in range(29)]


@dataclass(frozen=True)
class Stocked:
    target: Path  # the Q4_K_M target as a local file (load it as the "loaded target")
    draft: Path  # the Q8_0 draft as a local file
    files: dict[str, bytes]  # hub file name -> bytes, every file served


def stock(hub: FakeHub, make_gguf: GgufMaker, *, target_elements: int = 256 * 1024) -> Stocked:
    """Fill ``hub`` as the module docstring says; the target's Q4_K_M file holds ``target_elements`` floats."""

    def model(name: str, size_label: str, elements: int, **options: object) -> Path:
        return make_gguf(
            name, basename="Tiny", size_label=size_label, tensor_elements=elements, model_kv=SHAPE, **options
        )

    target = model("Tiny-1B-Q4_K_M.gguf", "1B", target_elements, general_name="Tiny 1B")
    q8 = model("Tiny-1B-Q8_0.gguf", "1B", target_elements * 2)
    f16 = model("Tiny-1B-F16.gguf", "1B", target_elements * 4).read_bytes()
    draft = model("Tiny-100M-Q8_0.gguf", "100M", 1024, general_name="Tiny 100M")
    draft_q4 = model("Tiny-100M-Q4_K_M.gguf", "100M", 512)
    stranger = model("Tiny-50M-Q8_0.gguf", "50M", 512, tokens=OTHER_VOCAB, tokenizer_model="llama")
    files = {
        "Tiny-1B-Q4_K_M.gguf": target.read_bytes(),
        "Tiny-1B-Q8_0.gguf": q8.read_bytes(),
        # a split model: the first part is a whole small GGUF (its header is what is read), the second the rest
        "F16/Tiny-1B-F16-00001-of-00002.gguf": f16,
        "F16/Tiny-1B-F16-00002-of-00002.gguf": b"\0" * (len(f16) // 2),
        "mmproj-Tiny-1B-F16.gguf": b"projector",
        "mtp-Tiny-1B-Q8_0.gguf": b"mtp layers",
    }
    for name, data in files.items():
        hub.add(TARGET_REPO, name, data)
    hub.add(TARGET_REPO, "README.md", b"# Tiny", lfs=False)
    for name, path in (("Tiny-100M-Q8_0.gguf", draft), ("Tiny-100M-Q4_K_M.gguf", draft_q4)):
        hub.add(DRAFT_REPO, name, path.read_bytes())
        files[name] = path.read_bytes()
    hub.add(STRANGER_REPO, "Tiny-50M-Q8_0.gguf", stranger.read_bytes())
    files["Tiny-50M-Q8_0.gguf"] = stranger.read_bytes()
    hub.downloads.update({TARGET_REPO: 1200, DRAFT_REPO: 800, STRANGER_REPO: 5})
    hub.updated.update({TARGET_REPO: "2024-09-19T10:00:00.000Z", DRAFT_REPO: "2024-08-01T10:00:00.000Z"})
    return Stocked(target, draft, files)
