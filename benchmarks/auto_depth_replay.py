"""Auto depth against fixed depths on the demo pair, replayed: the machine's noise taken out of the comparison.

On a busy machine the live benchmark (benchmarks/auto_depth.py) cannot tell a
few per cent apart. This one measures the pair once and then replays every
configuration on the same evidence:

- acceptance: for greedy decoding with a greedy draft, a round of depth k at
  position t accepts exactly the run of positions from t where the draft's
  argmax, given the target's own prefix, equals the target's token (capped at
  k). One plain decode and one scoring pass of the draft per prompt give
  that sequence exactly.
- costs: the medians of timed target decodes of n = 1..17 tokens (with the
  argmax of every row), of draft decodes of one and two tokens, and the
  per-round overhead measured by a live controller.

Each controller then chooses depths round by round from what it observes
(the measured costs with a seeded 10% jitter, as live timings jitter) and
each configuration's time is the sum of the measured costs of its rounds.
Controllers live through a whole run, over all prompts, as in the app; each
run has its own jitter. ``--costs FILE`` keeps the measured costs in FILE
(JSON) and, where FILE exists, replays with them instead of measuring again:
the same costs make two replays of a changed controller comparable figure by
figure.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/auto_depth_replay.py [--repeats 5] [--costs FILE]
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from auto_depth import AUTO, AUTO_IID, checked_depths, decode, prompts_by_id, run_parser  # the script's own folder

from specchat.core.engine.depth import AdaptiveDepth
from specchat.core.models.demo import provision_demo_pair
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import MAX_DEPTH, GenerationParams, SpecchatError

DEFAULT_IDS = ["explain-bicycle", "code-fizzbuzz", "summarize", "story", "email", "json", "m-copy", "m-open"]
JITTER = 0.1


@dataclass
class Costs:
    """Measured seconds: verify[n] for a batch of n tokens, a draft step, a draft catch-up, round overheads."""

    verify: dict[int, float]
    step: float
    sync: float
    plain_overhead: float
    drafted_overhead: float

    @classmethod
    def read(cls, path: Path) -> Costs:
        """The costs saved in ``path`` by :meth:`write`."""
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(**{**data, "verify": {int(n): s for n, s in data["verify"].items()}})

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self)), encoding="utf-8")

    def round_seconds(self, k: int) -> float:
        if k == 0:
            return self.verify[1] + self.plain_overhead
        return self.sync + (k - 1) * self.step + self.verify[k + 1] + self.drafted_overhead


def agreement(runtime: Runtime, prompt: list[int], generated: list[int]) -> list[bool]:
    """Whether the draft's argmax after the target's prefix equals the target's token, at each reply position."""
    ctx = runtime.draft_context
    assert ctx is not None
    ctx.truncate(0)
    ctx.extend_to(prompt[:-1])
    rows = ctx.decode([prompt[-1], *generated[:-1]], all_logits=True)
    argmax = rows.argmax(axis=1)
    ctx.truncate(0)
    return [bool(a == t) for a, t in zip(argmax, generated, strict=True)]


def _median_seconds(run: Callable[[], None], repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure_costs(runtime: Runtime, prompt: list[int], generated: list[int], max_n: int) -> Costs:
    """Time the target's verify passes per batch size and the draft's steps at a mid-reply context."""
    context = [*prompt, *generated[: len(generated) // 2]]
    batch = (generated * (max_n // max(len(generated), 1) + 1))[:max_n]
    target = runtime.target_context
    target.truncate(0)
    target.extend_to(context)

    def verify(n: int) -> None:
        rows = target.decode(batch[:n], all_logits=True)
        rows.argmax(axis=1)
        target.truncate(len(context))

    verify_seconds = {n: _median_seconds(functools.partial(verify, n)) for n in range(1, max_n + 1)}
    draft = runtime.draft_context
    assert draft is not None
    draft.truncate(0)
    draft.extend_to(context)

    def draft_decode(n: int) -> None:
        draft.decode(batch[:n])[0].argmax()
        draft.truncate(len(context))

    step = _median_seconds(functools.partial(draft_decode, 1))
    sync = _median_seconds(functools.partial(draft_decode, 2))
    target.truncate(0)
    draft.truncate(0)
    # The per-round overheads, as a live controller measures them.
    params = GenerationParams(max_tokens=48)
    live = AdaptiveDepth()
    decode(runtime, prompt, params, 0, live)
    plain_overhead = live.costs.overhead(False)
    decode(runtime, prompt, params, 4, live)
    return Costs(verify_seconds, step, sync, plain_overhead, live.costs.overhead(True))


def replay(bits: list[bool], depth: int | None, ctrl: AdaptiveDepth, costs: Costs, rng: random.Random) -> float:
    """Seconds to produce ``bits``' tokens at a fixed depth (or, for None, the controller's choices)."""
    seconds, pos, n = 0.0, 0, len(bits)
    while pos < n:
        k = ctrl.choose() if depth is None else depth
        k = max(0, min(k, n - pos - 1))
        accepted = 0
        while accepted < k and bits[pos + accepted]:
            accepted += 1

        def jitter(x: float) -> float:
            return x * rng.lognormvariate(0.0, JITTER)

        ctrl.observe(
            k,
            accepted,
            jitter(costs.step) if k > 1 else None,
            jitter(costs.verify[k + 1]),
            jitter(costs.drafted_overhead if k else costs.plain_overhead),
            jitter(costs.sync) if k else None,
        )
        seconds += costs.round_seconds(k)
        pos += accepted + 1
    return seconds


def position_curve(traces: dict[str, list[bool]], depth: int) -> list[float]:
    """The conditional acceptance per position over all prompts, drafting ``depth`` every round."""
    reached, accepted = [0] * depth, [0] * depth
    for bits in traces.values():
        pos = 0
        while pos < len(bits):
            k = min(depth, len(bits) - pos - 1)
            n = 0
            while n < k and bits[pos + n]:
                n += 1
            for i in range(min(n + 1, k)):
                reached[i] += 1
            for i in range(n):
                accepted[i] += 1
            pos += n + 1
    return [a / r if r else float("nan") for a, r in zip(accepted, reached, strict=True)]


def main() -> int:
    parser = run_parser(__doc__.splitlines()[0], DEFAULT_IDS, "1,2,3,4,6,8,12,16", 5)
    parser.add_argument("--costs", type=Path, help="JSON file of measured costs: read where it exists, else written")
    args = parser.parse_args()
    try:
        costs = Costs.read(args.costs) if args.costs is not None and args.costs.exists() else None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: cannot read the costs in {args.costs}: {exc}", file=sys.stderr)
        return 2
    measured = costs is None
    try:
        depths = checked_depths(args)
        by_id = prompts_by_id(args.prompts, args.ids)
        pair = provision_demo_pair()
        runtime = Runtime.load(pair.target, pair.draft, n_ctx=4096)
        params = GenerationParams(max_tokens=args.max_tokens)
        traces: dict[str, list[bool]] = {}
        for pid in args.ids:
            prompt = runtime.prompt(by_id[pid]).tokens
            generated = decode(runtime, prompt, params, 0, AdaptiveDepth())[0]
            traces[pid] = agreement(runtime, prompt, generated)
            if costs is None:
                costs = measure_costs(runtime, prompt, generated, MAX_DEPTH + 1)
        assert costs is not None
        if measured and args.costs is not None:
            costs.write(args.costs)
    except (SpecchatError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("verify ms per batch size: " + " ".join(f"{n}:{s * 1000:.1f}" for n, s in costs.verify.items()))
    print(
        f"draft step {costs.step * 1000:.1f} ms, catch-up {costs.sync * 1000:.1f} ms, overhead plain "
        f"{costs.plain_overhead * 1000:.2f} ms, drafted {costs.drafted_overhead * 1000:.2f} ms"
    )
    agree = sum(sum(b) for b in traces.values()) / sum(len(b) for b in traces.values())
    print(f"draft agrees with the target on {agree:.1%} of {sum(len(b) for b in traces.values())} tokens")
    print("conditional acceptance per position at depth 8: " + " ".join(f"{a:.3f}" for a in position_curve(traces, 8)))
    names = ["plain", *(f"d{k}" for k in depths), AUTO, AUTO_IID]
    ratios: dict[str, list[float]] = {AUTO: [], AUTO_IID: []}
    for r in range(args.repeats):
        rng = random.Random(r)
        controllers = {AUTO: AdaptiveDepth(), AUTO_IID: AdaptiveDepth(positional=False)}
        seconds = dict.fromkeys(names, 0.0)
        for bits in traces.values():
            for name in names:
                depth = None if name in controllers else (0 if name == "plain" else int(name[1:]))
                seconds[name] += replay(bits, depth, controllers.get(name, AdaptiveDepth()), costs, rng)
        speedup = {name: seconds["plain"] / s for name, s in seconds.items() if name != "plain"}
        fixed = {name: s for name, s in speedup.items() if name.startswith("d")}
        best = max(fixed, key=lambda name: fixed[name])
        print(
            f"run {r + 1}: fixed "
            + ", ".join(f"{name[1:]}: {s:.3f}x" for name, s in fixed.items())
            + f"; best {best[1:]}: {fixed[best]:.3f}x"
        )
        for name in (AUTO, AUTO_IID):
            ratios[name].append(speedup[name] / fixed[best])
            print(f"  {name:8s}: {speedup[name]:.3f}x, {ratios[name][-1]:.1%} of the best fixed depth")
    for name, values in ratios.items():
        print(
            f"{name} / best fixed per run: {' '.join(f'{x:.1%}' for x in values)}; "
            f"mean {statistics.mean(values):.1%}, min {min(values):.1%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
