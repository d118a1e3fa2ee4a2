"""Head files (EAGLE-3, DFlash, DFlash2, DSpark, MTP sidecars): described from their headers, judged against a
target, found beside it by name as llama-server -hf finds them, offered by the hub and paired by the library."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.core.models.download import download_quant, download_sidecars
from specchat.core.models.errors import HubNotFoundError, UnsafePathError
from specchat.core.models.heads import HeadInfo, check_head, find_sidecars, heads_beside, read_head, sidecar_kind
from specchat.core.models.hfcache import hf_cache_dir
from specchat.core.models.hub import HubFile, list_gguf_files, pick_quant_files, sidecars_for
from specchat.core.models.library import ModelRoot, scan
from specchat.core.models.pairs import compatibility_text
from support.gguf_files import BASE_VOCAB
from support.heads import dflash, eagle3, target


def head_of(path: Path) -> HeadInfo:
    """The head ``path`` holds, which must be one."""
    head = read_head(path)
    assert head is not None, path
    return head


def test_an_eagle3_head_is_described_from_its_header(make_gguf) -> None:
    head = read_head(eagle3(make_gguf))
    assert head is not None and head.kind == "eagle3"
    assert head.label == "EAGLE-3 head for Llama 3.1 8B Instruct"  # general.base_model.0.name
    assert head.target_layers == (2, 16, 29) and head.target_hidden_size == 64
    assert head.natural_depth is None  # drafts step by step: no block of its own


def test_dflash_dflash2_and_dspark_are_told_apart_as_llama_cpp_does(make_gguf) -> None:
    plain = read_head(dflash(make_gguf))
    assert plain is not None and plain.kind == "dflash" and plain.name == "DFlash head"
    assert plain.label == "DFlash head for LLaMA3.1 8B Instruct"  # from its name, the head's words left out
    assert plain.natural_depth == 7  # block 8, the first slot holds the last committed token
    two = read_head(dflash(make_gguf, "dflash2-x.gguf", top_k=4))
    assert two is not None and two.kind == "dflash2" and two.name == "DFlash2 head"
    spark = read_head(dflash(make_gguf, "dspark-x.gguf", dspark=True, anchor=True))
    assert spark is not None and spark.kind == "dspark" and spark.name == "DSpark head"
    assert spark.natural_depth == 8 and spark.sample_from_anchor is True  # anchor-first: the whole block


def test_ordinary_models_are_no_heads_and_an_mtp_sidecar_is(make_gguf) -> None:
    assert read_head(target(make_gguf)) is None
    mtp = make_gguf("mtp-Qwen3.6-27B-Q8_0.gguf", arch="qwen35", model_kv={"{arch}.nextn_predict_layers": 1})
    head = read_head(mtp)
    assert head is not None and head.kind == "mtp" and head.label.startswith("MTP layers")
    same_name_no_layers = make_gguf("mtp-empty.gguf", arch="qwen35")
    assert read_head(same_name_no_layers) is None


def test_a_head_that_fits_and_each_way_one_does_not(make_gguf) -> None:
    t = target(make_gguf)
    assert check_head(t, head_of(eagle3(make_gguf))).line() == (
        "✓ EAGLE-3 head for Llama 3.1 8B Instruct: fits this target"
    )
    deep = check_head(t, head_of(eagle3(make_gguf, "eagle3-70b.gguf", layers=[2, 40, 77])))
    assert not deep.ok and "reads target layer 40, but the target has 32 layers" in deep.line()
    wide = check_head(t, head_of(eagle3(make_gguf, "eagle3-wide.gguf", hidden=128)))
    assert wide.problems == ("it reads target states 128 wide, the target's are 64",)
    two = check_head(t, head_of(eagle3(make_gguf, "eagle3-two.gguf", layers=[2, 16])))
    assert two.problems == ("an EAGLE-3 head reads 3 target layers, this one names 2",)
    other_vocab = eagle3(make_gguf, "eagle3-qwen.gguf", tokens=[*BASE_VOCAB[:-1], "different"])
    vocab = check_head(t, head_of(other_vocab))
    assert vocab.problems[0].startswith("its vocabulary is not the target's")
    assert vocab.line().startswith("✗ EAGLE-3 head for Llama 3.1 8B Instruct does not fit this target: its vocab")
    # the layer equal to the target's count is its final hidden state (llama.cpp's nextn embeddings): allowed
    assert check_head(t, head_of(dflash(make_gguf))).ok


def test_the_picker_verdict_judges_a_head_as_a_head(make_gguf) -> None:
    t = target(make_gguf)
    assert compatibility_text(str(t), str(eagle3(make_gguf))) == (
        "✓ EAGLE-3 head for Llama 3.1 8B Instruct: fits this target"
    )
    deep = eagle3(make_gguf, "eagle3-deep.gguf", layers=[2, 16, 40])
    assert compatibility_text(str(t), str(deep)).startswith("✗ EAGLE-3 head")


def test_sidecars_are_chosen_by_name_as_llama_server_does() -> None:
    files = [
        "a/model-Q4_K_M.gguf",
        "a/eagle3-x-Q8_0.gguf",
        "a/eagle3-x-Q4_0.gguf",
        "eagle3-root-Q4_K_M.gguf",
        "a/b/dflash-deeper.gguf",
        "mtp-model-Q4_K_M.gguf",
        "Qwen3.6-27B-MTP-Q4_K_M.gguf",
        "dspark-y-00002-of-00002.gguf",
        "DFlash-Upper-case.gguf",
    ]
    found = find_sidecars(files, "a/model-Q4_K_M.gguf")
    # the deepest folder first, then the closest quant (Q4_0 over Q8_0 for a Q4 model); a folder below the
    # model's is no sibling; a later split part is no sidecar of its own; "DFlash-" is not "dflash-"
    assert found == {"eagle3": "a/eagle3-x-Q4_0.gguf", "mtp": "mtp-model-Q4_K_M.gguf"}
    assert sidecar_kind("Qwen3.6-27B-MTP-Q4_K_M.gguf") is None  # a target with its MTP layers inside
    assert sidecar_kind("MTP/gemma-4-31B-it-MTP-Q8_0.gguf") is None and sidecar_kind("dspark-a.gguf") == "dspark"


def test_choosing_a_quant_never_picks_a_sidecar() -> None:
    files = [
        HubFile(n, 1, None)
        for n in (
            "eagle3-Llama-Q4_K_M.gguf",
            "dflash-Llama-Q4_K_M.gguf",
            "Llama-3.1-8B-Q4_K_M.gguf",
            "dspark-Llama-Q4_K_M.gguf",
        )
    ]
    assert [f.filename for f in pick_quant_files(files, "Q4_K_M")] == ["Llama-3.1-8B-Q4_K_M.gguf"]
    assert [(k, f.filename) for k, f in sidecars_for(files, "Llama-3.1-8B-Q4_K_M.gguf")] == [
        ("dflash", "dflash-Llama-Q4_K_M.gguf"),
        ("dspark", "dspark-Llama-Q4_K_M.gguf"),
        ("eagle3", "eagle3-Llama-Q4_K_M.gguf"),
    ]


from support.heads import REPO  # noqa: E402 - beside the fixtures that use it


@pytest.fixture
def heads_repo(hub, make_gguf):
    """A repository holding a target and three head sidecars, as llama-server -hf repositories do."""
    files = {
        "Llama-3.1-8B-Instruct-Q4_K_M.gguf": target(make_gguf).read_bytes(),
        "eagle3-Llama-3.1-8B-Instruct-Q8_0.gguf": eagle3(make_gguf).read_bytes(),
        "dflash-Llama-3.1-8B-Q8_0.gguf": dflash(make_gguf).read_bytes(),
        "dspark-Llama-3.1-8B-Q8_0.gguf": dflash(make_gguf, "dspark-src.gguf", dspark=True, anchor=True).read_bytes(),
    }
    for name, data in files.items():
        hub.add(REPO, name, data)
    hub.files = files
    return hub


def test_hub_sidecars_are_listed_downloaded_and_paired_in_the_library(heads_repo) -> None:
    listing = list_gguf_files(REPO, endpoint=heads_repo.url)
    model = pick_quant_files(listing, "Q4_K_M", REPO)[0].filename
    assert model == "Llama-3.1-8B-Instruct-Q4_K_M.gguf"
    assert [k for k, _ in sidecars_for(listing, model)] == ["dflash", "dspark", "eagle3"]
    [t] = download_quant(REPO, "Q4_K_M", endpoint=heads_repo.url)
    assert heads_repo.gets("eagle3-Llama-3.1-8B-Instruct-Q8_0.gguf") == []  # nothing fetched unasked
    with pytest.raises(HubNotFoundError, match=r"no mtp sidecar beside .* \(sidecars there: dflash"):
        download_sidecars(REPO, model, kinds=["mtp"], endpoint=heads_repo.url)
    got = download_sidecars(REPO, model, kinds=["eagle3", "dspark"], endpoint=heads_repo.url)
    assert [(k, f.path.read_bytes() == heads_repo.files[f.filename]) for k, f in got] == [
        ("dspark", True),
        ("eagle3", True),
    ]
    assert {p.name for p in heads_beside(t.path)} == {
        "eagle3-Llama-3.1-8B-Instruct-Q8_0.gguf",
        "dspark-Llama-3.1-8B-Q8_0.gguf",
    }

    entries = {e.path.name: e for e in scan([ModelRoot(hf_cache_dir(), "hf-cache")]).entries}
    pairs = entries["Llama-3.1-8B-Instruct-Q4_K_M.gguf"]
    assert sorted(p.name for p in pairs.sidecars) == [
        "dspark-Llama-3.1-8B-Q8_0.gguf",
        "eagle3-Llama-3.1-8B-Instruct-Q8_0.gguf",
    ]
    assert entries["eagle3-Llama-3.1-8B-Instruct-Q8_0.gguf"].what == "EAGLE-3 head for Llama 3.1 8B Instruct"
    dspark = entries["dspark-Llama-3.1-8B-Q8_0.gguf"]
    assert dspark.head is not None and dspark.head.kind == "dspark"
    assert pairs.to_json()["sidecars"]
    stored = dspark.to_json()["head"]
    assert isinstance(stored, dict) and stored["kind"] == "dspark"


def test_a_listing_with_a_hostile_sidecar_name_is_refused_whole(hub, make_gguf) -> None:
    hub.add(REPO, "Llama-3.1-8B-Instruct-Q4_K_M.gguf", target(make_gguf).read_bytes())
    hub.add(REPO, "../eagle3-escape.gguf", b"x")
    with pytest.raises(UnsafePathError, match="eagle3-escape"):
        download_sidecars(REPO, "Llama-3.1-8B-Instruct-Q4_K_M.gguf", endpoint=hub.url)
    assert hub.gets("eagle3-escape.gguf") == []
