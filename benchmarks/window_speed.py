"""The speed a user sees: replies driven through the real window against ``specchat bench``, side by side.

For each prompt, in a new conversation: the window sends it with its default
settings (the automatic drafter, auto depth) and draws it live (Markdown,
fates); its panel's speed-up is read (the reply over plain decoding timed
right after it). The reply is then raced (plain decoding of the same prompt on
the window's runtime thread) and the race's ratio read. Bench decodes the
prompt plainly and speculatively on the same runtime with the same drafter and
depth while the window waits, nothing drawn: after the window's reply for even
prompts, before it for odd ones (the second decode of a prompt finds the
drafter's tables warmed by the first). Columns:

- ``win tok/s``, ``bench tok/s``: the speculative reply's rate drawn live in
  the window and undrawn in bench; ``draw`` is the first over the second - 1
  (what drawing costs the runtime);
- ``panel``, ``race``, ``bench``: the three speed-up figures of the prompt.

With ``--load N``, N busy processes (one pure-Python spin loop each) run for
the whole measurement, as a stated background load.

    QT_QPA_PLATFORM=offscreen python benchmarks/window_speed.py [--prompts FILE] [--limit 6] [--max-tokens 96]
        [--load 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from background_load import background_load  # the script's own folder
from window_defaults import TEST_PROMPTS
from window_driver import open_window, race_last_reply, send_and_wait


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=Path, default=TEST_PROMPTS)
    parser.add_argument("--limit", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--load", type=int, default=0, help="busy background processes during the run")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="specchat-window-speed-")

    from specchat.cli.bench import BenchReport, bench, load_prompts
    from specchat.core.engine.registry import drafter_entry

    opened = open_window(args.max_tokens, tmp)
    window = opened.window
    drafter = window.controls.drafter_kind
    prompts = load_prompts(args.prompts, args.limit)
    print(
        f"demo pair in the window, {drafter_entry(drafter).key} drafter, auto depth, {args.max_tokens} tokens, "
        f"background load: {args.load} busy process(es) on {os.cpu_count()} cores"
    )
    print(
        f"{'prompt':<16}{'win tok/s':>10}{'bench tok/s':>12}{'draw':>8}{'panel':>9}{'race':>8}{'bench':>8}"
        f"  panel figure"
    )
    rows: list[tuple[float, float, float | None, float, float]] = []

    def headless(pid: str, messages: list[dict[str, str]]) -> BenchReport:
        runtime = window.host.worker.runtime
        assert runtime is not None
        (report,) = bench(runtime, [(pid, messages[-1:])], window.controls.generation_params(), drafter, [None])
        window.host.worker._session = None  # bench moved the caches: the next reply starts a session afresh
        return report

    with background_load(args.load):
        for i, (pid, messages) in enumerate(prompts):
            # Which decodes the prompt first alternates: the second finds the composite's tables warmed by the
            # first, so a fixed order would flatter one side.
            early = headless(pid, messages) if i % 2 else None
            window.new_conversation()
            window.composer.setPlainText(messages[-1]["content"])
            reply = send_and_wait(window)
            window_rate, panel, panel_text = reply.tokens_per_second, reply.panel, reply.panel_text
            race = race_last_reply(window).ratio  # both runs of the race, interleaved

            report = early if early is not None else headless(pid, messages)
            result = report.per_prompt[0]
            rows.append((window_rate, result.speculative_tokens_per_s, panel, race, report.speedup))
            shown = f"{panel:>8.2f}x" if panel is not None else f"{'-':>9}"
            print(
                f"{pid[:15]:<16}{window_rate:>10.1f}{result.speculative_tokens_per_s:>12.1f}"
                f"{window_rate / result.speculative_tokens_per_s - 1:>+8.1%}{shown}{race:>7.2f}x"
                f"{report.speedup:>7.2f}x  {panel_text}",
                flush=True,
            )
    draw = [w / b - 1 for w, b, _, _, _ in rows]
    panel_vs_race = [p / r - 1 for _, _, p, r, _ in rows if p is not None]
    panel_vs_bench = [p / b - 1 for _, _, p, _, b in rows if p is not None]
    print(
        f"median draw cost {statistics.median(draw):+.1%}; panel against race: median "
        f"{statistics.median(panel_vs_race):+.1%}, worst {max(panel_vs_race, key=abs):+.1%}; "
        f"panel against bench: median {statistics.median(panel_vs_bench):+.1%}, "
        f"worst {max(panel_vs_bench, key=abs):+.1%}; panel figures shown {len(panel_vs_race)}/{len(rows)}"
    )
    opened.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
