"""Browsing the loopback hub: search, quantisations grouped with sizes, headers read in place, verdicts, the
draft offered beside a target, downloads of a choice, and hubs that answer with nonsense."""

from __future__ import annotations

import pytest

from specchat.core.cancel import CancelToken
from specchat.core.models import hub_browse
from specchat.core.models.download import format_bytes
from specchat.core.models.errors import DownloadCancelledError, GgufReadError
from specchat.core.models.fit import MachineMemory
from specchat.core.models.ggufmeta import read_gguf_info
from specchat.core.models.hub_browse import (
    find_draft,
    group_quants,
    judge,
    list_choices,
    read_choice,
    read_loaded_target,
    search,
)
from specchat.core.models.hub_header import FIRST_READ, read_remote_model
from specchat.core.types import SpecchatError
from support.gguf_files import GgufMaker
from support.hub_models import DRAFT_REPO, STRANGER_REPO, TARGET_REPO, stock
from support.hubserver import FakeHub

ROOMY = MachineMemory(ram_free=16 * 10**9, gpu_free=0)


def test_search_gives_downloads_likes_and_the_update_day(hub: FakeHub, make_gguf: GgufMaker) -> None:
    stock(hub, make_gguf)
    found = search("tiny", endpoint=hub.url)
    assert [r.repo_id for r in found] == [TARGET_REPO, DRAFT_REPO, STRANGER_REPO]  # most downloaded first
    assert (found[0].downloads, found[0].likes, found[0].last_modified) == (1200, 1, "2024-09-19")
    assert found[2].last_modified is None
    assert search("nothing-like-it", endpoint=hub.url) == []


def test_a_repository_is_grouped_by_quantisation_with_sizes(hub: FakeHub, make_gguf: GgufMaker) -> None:
    stocked = stock(hub, make_gguf)
    choices = list_choices(TARGET_REPO, endpoint=hub.url)
    assert [c.label for c in choices] == ["Q4_K_M", "Q8_0", "F16"]  # smallest first; side files left out
    sizes = {c.label: c.size for c in choices}
    assert sizes["Q4_K_M"] == len(stocked.files["Tiny-1B-Q4_K_M.gguf"])
    split = choices[2]
    assert len(split.files) == 2 and split.first.filename == "F16/Tiny-1B-F16-00001-of-00002.gguf"
    parts = ("F16/Tiny-1B-F16-00001-of-00002.gguf", "F16/Tiny-1B-F16-00002-of-00002.gguf")
    assert split.size == sum(len(stocked.files[p]) for p in parts)  # the split model counted once, whole


def test_a_split_model_without_its_first_part_is_not_offered() -> None:
    from specchat.core.models.hub import HubFile

    files = [HubFile("m-Q4_0-00002-of-00002.gguf", 5, None), HubFile("m-Q8_0.gguf", 9, None)]
    assert [c.label for c in group_quants(files)] == ["Q8_0"]


def test_a_header_is_read_on_the_hub_as_on_disk(hub: FakeHub, make_gguf: GgufMaker) -> None:
    stocked = stock(hub, make_gguf)
    [q4] = [c for c in list_choices(TARGET_REPO, endpoint=hub.url) if c.quant == "Q4_K_M"]
    remote = read_choice(TARGET_REPO, q4, endpoint=hub.url)
    local = read_gguf_info(stocked.target, with_vocab=True)
    assert remote.info.vocab_fingerprint == local.vocab_fingerprint and remote.info.vocab == local.vocab
    assert (remote.info.name, remote.info.basename, remote.info.quant) == ("Tiny 1B", "Tiny", local.quant)
    assert remote.shape is not None and remote.shape.n_layers == 2 and remote.shape.file_size == q4.size
    # only the head of the file was asked for
    assert all(r.range == f"bytes=0-{FIRST_READ - 1}" for r in hub.gets("Tiny-1B-Q4_K_M.gguf"))


def test_a_header_longer_than_the_first_read_is_read_in_growing_pieces(hub: FakeHub, make_gguf: GgufMaker) -> None:
    tokens = [f"a-rather-long-token-text-{i:06d}" for i in range(40_000)]  # about 1.6 MB of vocabulary
    big = make_gguf("big.gguf", tokens=tokens, token_types=[1] * len(tokens))
    hub.add("big/Vocab-GGUF", "big-Q8_0.gguf", big.read_bytes())
    remote = read_remote_model("big/Vocab-GGUF", "big-Q8_0.gguf", big.stat().st_size, endpoint=hub.url)
    assert remote.info.vocab_size == 40_000 and remote.info.vocab_fingerprint == read_gguf_info(big).vocab_fingerprint
    assert [r.range for r in hub.gets("big-Q8_0.gguf")] == [
        f"bytes=0-{FIRST_READ - 1}",
        f"bytes=0-{4 * FIRST_READ - 1}",
    ]


def test_a_file_that_is_no_gguf_gets_one_line(hub: FakeHub) -> None:
    hub.add("junk/Model-GGUF", "model-Q4_0.gguf", b"<html>not a model</html>" * 10)
    with pytest.raises(GgufReadError, match="not a readable GGUF file") as caught:
        read_remote_model("junk/Model-GGUF", "model-Q4_0.gguf", 240, endpoint=hub.url)
    assert "\n" not in str(caught.value)


def test_verdicts_against_the_loaded_target(hub: FakeHub, make_gguf: GgufMaker) -> None:
    stocked = stock(hub, make_gguf)
    loaded = read_loaded_target(str(stocked.target))
    assert loaded is not None
    draft = read_choice(DRAFT_REPO, list_choices(DRAFT_REPO, endpoint=hub.url)[-1], endpoint=hub.url)
    verdict = judge(draft, loaded, 2048, ROOMY)
    assert verdict.role == "draft" and verdict.ok
    assert verdict.text.startswith("✓ as a draft for Tiny 1B: compatible"), verdict.text
    assert "needs about" in verdict.text and "\n" not in verdict.text

    stranger = read_choice(STRANGER_REPO, list_choices(STRANGER_REPO, endpoint=hub.url)[0], endpoint=hub.url)
    verdict = judge(stranger, loaded, 2048, ROOMY)
    assert verdict.role == "draft" and not verdict.ok
    assert verdict.text.startswith("✗ as a draft for Tiny 1B: incompatible: different tokenizers")

    # a file as big as the loaded target is judged as a target in its place: does it fit?
    q8 = next(c for c in list_choices(TARGET_REPO, endpoint=hub.url) if c.quant == "Q8_0")
    big = read_choice(TARGET_REPO, q8, endpoint=hub.url)
    assert judge(big, loaded, 2048, ROOMY).text.startswith("✓ as a target: the model needs about")
    cramped = judge(big, loaded, 2048, MachineMemory(ram_free=1000, gpu_free=0))
    assert not cramped.ok and cramped.text.startswith("✗ as a target: the model needs about")
    assert judge(big, None, 2048, ROOMY).role == "target"  # with nothing loaded, everything is a target


def test_the_draft_beside_a_target_is_the_smallest_of_its_family_that_shares_its_vocabulary(
    hub: FakeHub, make_gguf: GgufMaker
) -> None:
    stocked = stock(hub, make_gguf)
    target = read_choice(TARGET_REPO, list_choices(TARGET_REPO, endpoint=hub.url)[0], endpoint=hub.url)
    offer = find_draft(TARGET_REPO, target, endpoint=hub.url)
    assert offer is not None  # the 50M stranger is smaller but speaks another vocabulary
    assert (offer.repo_id, offer.choice.quant, offer.source) == (DRAFT_REPO, "Q8_0", "same family on the hub")
    assert offer.ok and offer.verdict.startswith("✓ compatible")
    size = format_bytes(len(stocked.files["Tiny-100M-Q8_0.gguf"]))
    assert offer.line().startswith(f"{DRAFT_REPO} Q8_0, {size} (same family on the hub): ✓ compatible")


def test_a_catalog_target_gets_the_catalogs_draft(
    hub: FakeHub, make_gguf: GgufMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    from specchat.core.models import catalog

    stock(hub, make_gguf)
    pairs = """{"pairs": [{"id": "tiny", "name": "Tiny 1B + 100M", "memory_gb": 1, "license": "mit", "good_for": "t",
      "target": {"repo": "tiny/Tiny-1B-GGUF", "quant": "Q4_K_M", "size_gb": 0.001},
      "draft": {"repo": "tiny/Tiny-100M-GGUF", "quant": "Q4_K_M", "size_gb": 0.001}}]}"""
    monkeypatch.setattr(hub_browse, "load_catalog", lambda: catalog.parse_catalog(pairs))
    target = read_choice(TARGET_REPO, list_choices(TARGET_REPO, endpoint=hub.url)[0], endpoint=hub.url)
    offer = find_draft(TARGET_REPO, target, endpoint=hub.url)
    assert offer is not None and offer.choice.quant == "Q4_K_M" and offer.source == "the catalog's pair Tiny 1B + 100M"
    assert not any(r.path == "/api/models" for r in hub.requests)  # the catalog knew: no search


def test_no_draft_when_the_family_has_none(hub: FakeHub, make_gguf: GgufMaker) -> None:
    stock(hub, make_gguf)
    del hub.repos[DRAFT_REPO]
    target = read_choice(TARGET_REPO, list_choices(TARGET_REPO, endpoint=hub.url)[0], endpoint=hub.url)
    assert find_draft(TARGET_REPO, target, endpoint=hub.url) is None


def test_a_split_choice_downloads_every_part_and_resumes(hub: FakeHub, make_gguf: GgufMaker) -> None:
    stocked = stock(hub, make_gguf)
    split = list_choices(TARGET_REPO, endpoint=hub.url)[-1]
    hub.cut_after = [1000]  # the first part's first GET drops after 1000 bytes: the retry asks for the rest
    got = hub_browse.download_choice(TARGET_REPO, split, "target", endpoint=hub.url, retry_wait=0.0)
    assert [f.filename for f in got] == [f.filename for f in split.files]
    assert all(f.path.read_bytes() == stocked.files[f.filename] for f in got)
    assert [r.range for r in hub.gets("Tiny-1B-F16-00001-of-00002.gguf")] == [None, "bytes=1000-"]


@pytest.mark.parametrize(
    "trouble",
    [
        {"raw_api": ("text/html", b"<html><body>Welcome to nginx!</body></html>")},
        {"raw_api": ("application/json", b'{"models": "not a list"}')},
        {"raw_api": ("application/json", b'[{"id": 5, "downloads": "many"}]')},
        {"api_status": 500},
    ],
    ids=["html", "wrong-shape", "wrong-types", "500"],
)
def test_a_hub_that_answers_nonsense_is_one_line(hub: FakeHub, trouble: dict[str, object]) -> None:
    hub.add(TARGET_REPO, "x-Q4_0.gguf", b"x")
    for name, value in trouble.items():
        setattr(hub, name, value)
    for call in (lambda: search("tiny", endpoint=hub.url), lambda: list_choices(TARGET_REPO, endpoint=hub.url)):
        with pytest.raises(SpecchatError) as caught:
            call()
        assert str(caught.value) and "\n" not in str(caught.value)


def test_a_hub_that_does_not_answer_times_out_and_a_search_can_be_cancelled(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.stall_api = 30.0
    monkeypatch.setattr(hub_browse, "SEARCH_TIMEOUT", 0.5)
    with pytest.raises(SpecchatError, match=r"the search for 'tiny': no answer in 0 s; is the hub up\?"):
        search("tiny", endpoint=hub.url)
    cancel = CancelToken()
    cancel.cancel()
    with pytest.raises(DownloadCancelledError):
        search("tiny", endpoint=hub.url, cancel=cancel)
    _let_abandoned_calls_end(hub)


def _let_abandoned_calls_end(hub: FakeHub) -> None:
    """The stalled answers go out, so the calls left behind end (and close their sockets) within this test."""
    import threading

    hub.release.set()
    for thread in threading.enumerate():
        if thread.name == "hub-call":
            thread.join(timeout=30)


def test_the_verdict_names_the_loaded_target_readably(hub: FakeHub, make_gguf: GgufMaker) -> None:
    from support.hub_models import SHAPE

    stock(hub, make_gguf)
    mangled = make_gguf(
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        basename="Tiny",
        size_label="1B",
        tensor_elements=256 * 1024,
        model_kv=SHAPE,
        general_name="Smollm2 135M 8k Lc100K Mix1 Ep2",
    )
    loaded = read_loaded_target(str(mangled))
    draft = read_choice(DRAFT_REPO, list_choices(DRAFT_REPO, endpoint=hub.url)[0], endpoint=hub.url)
    assert judge(draft, loaded, 2048, ROOMY).text.startswith("✓ as a draft for SmolLM2-135M-Instruct: compatible")
