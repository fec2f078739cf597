"""One engine's measurements in a process of its own; the parent reads the JSON line it prints.

    python -m bench.cel_engines.worker ENGINE speed --devices N --rounds R --compile-rounds C
    python -m bench.cel_engines.worker ENGINE features [--cost-size S]

A process per engine because the stock celpy runners cannot share one (celpy keeps one parser
for every Environment), and so that no engine's imports, caches or garbage weigh on another's
timings.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from bench.cel_engines.measure import measure_features, measure_speed
from bench.cel_engines.registry import ENGINES, load

__all__ = ["RESULT_PREFIX", "main"]

#: The line the parent looks for (engines may print to stdout themselves).
RESULT_PREFIX = "RESULT "


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cel_engines.worker")
    parser.add_argument("engine", choices=sorted(ENGINES))
    parser.add_argument("task", choices=("speed", "features"))
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compile-rounds", type=int, default=20)
    parser.add_argument("--cost-size", type=int, default=None)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    engine = load(args.engine)
    setup_ms = (time.perf_counter() - start) * 1e3
    if args.task == "speed":
        result = measure_speed(engine, devices=args.devices, rounds=args.rounds, compile_rounds=args.compile_rounds)
    else:
        result = measure_features(engine, cost_size=args.cost_size)
    result["setup_ms"] = setup_ms
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
