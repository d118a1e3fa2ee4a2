"""Will speculation pay on this backend? The rule on constructed calibrations, and its memory per target."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from specchat.core.advise.calibrate import RoundSample
from specchat.core.advise.payoff import Outlook, VerifyScaling, known, payoff, remember, verify_scaling

MODELS = Path(__file__).resolve().parents[2] / "models"


def calibration(batch_of_8: float, one: float = 0.010, depths: range = range(0, 9)) -> list[RoundSample]:
    """Rounds as a calibration records them, on a backend where verify(n) grows linearly to ``batch_of_8``
    one-token passes at n = 8 (two rounds per size, a little noise apart)."""
    slope = (batch_of_8 - 1.0) / 7
    rounds = []
    for drafted in depths:
        seconds = one * (1 + drafted * slope)
        rounds += [RoundSample(drafted, drafted, 0, seconds * 0.99), RoundSample(drafted, drafted, 0, seconds * 1.01)]
    return rounds


def measured_scaling(rounds: list[RoundSample]) -> VerifyScaling:
    """The scaling ``rounds`` measure, which they must (a one-token pass and larger batches)."""
    scaling = verify_scaling(rounds)
    assert scaling is not None
    return scaling


def test_a_metal_like_backend_cannot_pay_and_says_why_with_the_ratio() -> None:
    scaling = verify_scaling(calibration(6.5))
    assert scaling is not None and scaling.ratio(8) == pytest.approx(6.5)
    verdict = payoff(scaling)
    assert verdict.outlook is Outlook.CANNOT and not verdict.pays
    assert verdict.ceiling < 1.1
    line = verdict.line()
    assert line.startswith("Speculation cannot pay on this backend: a batch of 8 tokens costs 6.5x one token here")
    assert "(81% of decoding them one by one)" in line and f"{verdict.ceiling:.2f}x" in line


def test_a_gpu_like_backend_pays_and_one_in_between_pays_little() -> None:
    gpu = payoff(measured_scaling(calibration(2.4)))
    assert gpu.outlook is Outlook.PAYS and gpu.ceiling > 1.8 and gpu.best_depth > 1
    middle = payoff(measured_scaling(calibration(5.0)))
    assert middle.outlook is Outlook.LITTLE and 1.1 <= middle.ceiling < 1.3
    assert middle.line().startswith("Speculation can pay only a little")


def test_it_needs_a_one_token_pass_and_a_batch_and_reads_unmeasured_sizes_off_a_line() -> None:
    assert verify_scaling(calibration(6.5, depths=range(0, 1))) is None  # plain rounds only
    assert verify_scaling(calibration(6.5, depths=range(1, 9))) is None  # no one-token pass
    sparse = verify_scaling(calibration(6.5, depths=range(0, 4)))  # batches of 2..4 measured
    assert sparse is not None and 8 not in sparse.batches
    assert sparse.ratio(8) == pytest.approx(6.5)  # the line through 2..4, carried to 8
    one_batch = VerifyScaling(0.01, {3: 0.02})  # a line from the one-token pass through the one batch
    assert one_batch.ratio(5) == pytest.approx(3.0) and one_batch.ratio(1) == 1.0
    assert VerifyScaling(0.01, {2: 0.005}).ratio(2) == 1.0  # never cheaper than one pass


def test_the_verdict_is_kept_per_target_file_until_it_changes(tmp_path: Path) -> None:
    target = tmp_path / "target.gguf"
    shutil.copy(MODELS / "llama.gguf", target)
    assert known(target) is None
    verdict = payoff(measured_scaling(calibration(6.5)))
    remember(target, verdict)
    assert known(target) == verdict
    assert known(MODELS / "llama-q8.gguf") is None  # another file
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert known(target) is None  # the file changed since
