"""specchat's plain decoding in-process against ``llama-server``'s plain, side by side: the server's own share.

``benchmarks/server_vs_llama_server.py`` measures plain decoding through
``specchat serve``; this takes the HTTP server away. The mixed prompts go, in
turn, to a ``llama-server`` (plain, the same model and threads) through the
``openai`` client and to the engine's plain loop (``generate`` with no drafter)
in this process. Both rates are tokens over the time from the first to the
last token, as in the server benchmark.

    python benchmarks/plain_in_process.py [--repeats 3] [--max-tokens 48] [--threads 2] [--with-draft]
        [--llama-server PATH]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    import server_vs_llama_server as peer

    from specchat.core.engine.speculative import generate
    from specchat.core.models.demo import provision_demo_pair
    from specchat.core.runtime.runtime import Runtime
    from specchat.core.types import DrafterKind, Finished, GenerationParams, Verified

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--llama-server", type=Path, default=None)
    parser.add_argument("--with-draft", action="store_true", help="load the draft model too, as the server does")
    args = parser.parse_args()
    pair = provision_demo_pair()
    binary = args.llama_server or peer.build_llama_server()
    port = peer.free_port()
    log = peer.CACHE / "bench-logs" / "plain-in-process.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    server = peer.start(
        "llama-plain",
        [
            str(binary),
            "-m",
            str(pair.target),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "-c",
            "4096",
            "-np",
            "1",
            "-t",
            str(args.threads),
            "-ngl",
            "0",
            "--no-webui",
            "--seed",
            "0",
        ],
        port,
        log,
    )
    runtime = Runtime.load(pair.target, pair.draft if args.with_draft else None, n_ctx=4096, n_threads=args.threads)
    plain = runtime.drafter_for(DrafterKind.NONE)
    totals = {"in-process": [0, 0.0], "llama-server": [0, 0.0]}
    try:
        for _category, _rid, messages in peer.workload(None) * max(1, args.repeats):
            r = peer.run_request(server, messages, args.max_tokens)
            totals["llama-server"][0] += r["tokens"]
            totals["llama-server"][1] += r["seconds"]
            prompt = runtime.prompt(messages).tokens
            first = last = 0.0
            for event in generate(runtime.target_side, plain, prompt, GenerationParams(max_tokens=args.max_tokens)):
                if isinstance(event, Verified) and (event.accepted or event.correction is not None):
                    last = time.perf_counter()
                    first = first or last
                elif isinstance(event, Finished):
                    totals["in-process"][0] += event.stats.generated
            totals["in-process"][1] += last - first
    finally:
        server.proc.terminate()
        runtime.close()
    rates = {name: tokens / seconds for name, (tokens, seconds) in totals.items()}
    print(
        f"in-process plain {rates['in-process']:.1f} tok/s, llama-server plain {rates['llama-server']:.1f} tok/s: "
        f"{rates['in-process'] / rates['llama-server']:.3f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
