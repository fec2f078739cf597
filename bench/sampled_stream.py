"""The service's own CPU per scheduled pod under a sampling kube-scheduler, in one process.

Run from the repository root::

    python -m bench.sampled_stream                      # 5000 nodes x 10 GPUs, 1000 one-GPU pods, windows of 500
    python -m bench.sampled_stream --nodes 15000 --window 750 --pods 2000
    python -m bench.sampled_stream --quick              # tiny sizes; the CI smoke run
    python -m bench.sampled_stream --filter-picks-node  # the filter names the node: no prioritize

What kube-scheduler sends with ``percentageOfNodesToScore`` (docs/performance.md, pass 5): every pod
a candidate list of ``--window`` names that starts where the previous one ended, give or take a few
nodes (which nodes its parallel filters found first), so lists rarely repeat; prioritize over exactly
the nodes the filter passed, in its order (not when the filter named one node, as kube-scheduler
does not: ``--filter-picks-node``); then the bind on the best-scored node. Each request is
JSON-encoded and parsed as the server would (orjson), without HTTP, on the embedded backend
(``bench.cluster_gen``: GPU nodes, direct one-GPU claims), after the service's warm-up.

Prints, per verb, the process CPU time per pod (``time.process_time``) over the pods after the first
tenth (the warm-up of the first lists), best and median of ``--repeat`` runs, each on a fresh cluster.
The same seed gives the same cluster and the same lists. Timings are printed, never asserted: on a
shared machine compare runs made one after the other, alternated.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import platform
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import orjson
import structlog

from bench import cluster_gen
from bench.common import positive_ints

__all__ = ["StreamResult", "main", "run_stream"]

VERBS = ("filter", "prioritize", "bind")


@dataclass(frozen=True)
class StreamResult:
    """CPU ms per pod by verb, over the measured pods, how many were bound and how many
    prioritize requests were sent (none for a pod the filter named one node for)."""

    cpu_ms: dict[str, float]
    measured: int
    bound: int
    prioritized: int = 0


def _windows(names: list[str], count: int, window: int, rng: random.Random) -> list[list[str]]:
    """Candidate lists as a sampling kube-scheduler sends them: each starts where the last ended,
    shifted by up to three nodes."""
    lists: list[list[str]] = []
    start = 0
    for _ in range(count):
        start = (start + window + rng.randint(-3, 3)) % len(names)
        lists.append([names[(start + i) % len(names)] for i in range(min(window, len(names)))])
    return lists


async def _replay(nodes: int, devices: int, pods: int, window: int, seed: int, picks: bool) -> StreamResult:
    from extender.backends.embedded import EmbeddedBackend
    from extender.cli import DEFAULT_SCORING
    from extender.core.scoring import ScoringPolicy
    from extender.server.wire import encode_priority_columns, filter_result, parse_extender_args
    from extender.state.service import SchedulingService

    spec = cluster_gen.ClusterSpec(
        nodes=nodes, devices=devices, nics=0, pods=pods, mix={"direct": 1.0}, shapes={"one-gpu": 1.0}, seed=seed
    )
    objects = cluster_gen.generate(spec)
    service = SchedulingService(
        backend=EmbeddedBackend(objects), scoring=ScoringPolicy.parse(DEFAULT_SCORING), filter_picks_node=picks
    )
    await service.warm_up()
    names = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "Node")
    stream = cluster_gen.pods_of(objects)
    lists = _windows(names, len(stream), window, random.Random(seed))
    skip = len(stream) // 10
    cpu = dict.fromkeys(VERBS, 0.0)
    bound = prioritized = 0
    for index, (pod, candidates) in enumerate(zip(stream, lists, strict=True)):
        started = time.process_time()
        args = parse_extender_args(orjson.loads(orjson.dumps({"Pod": pod, "NodeNames": candidates})))
        outcome = await service.filter_and_recover(args.pod, args.node_names)
        orjson.dumps(filter_result(args, outcome.node_names, failed=outcome.failed, unresolvable=outcome.unresolvable))
        filtered = time.process_time()
        best = None
        if len(outcome.node_names) == 1:  # kube-scheduler binds without scoring or prioritize
            best = outcome.node_names[0]
        elif outcome.node_names:
            prioritized += 1
            again = parse_extender_args(orjson.loads(orjson.dumps({"Pod": pod, "NodeNames": outcome.node_names})))
            hosts, scores = await service.prioritize_cooperatively(again.pod, again.node_names)
            _, top = encode_priority_columns(hosts, scores)
            best = top[0] if top else None
        scored = time.process_time()
        if best is not None:
            meta = pod["metadata"]
            await service.bind(meta["namespace"], meta["name"], meta["uid"], best)
            bound += 1
        ended = time.process_time()
        if index >= skip:
            cpu["filter"] += filtered - started
            cpu["prioritize"] += scored - filtered
            cpu["bind"] += ended - scored
    measured = max(1, len(stream) - skip)
    per_pod = {verb: 1000 * seconds / measured for verb, seconds in cpu.items()}
    return StreamResult(per_pod, measured, bound, prioritized)


def run_stream(nodes: int, devices: int, pods: int, window: int, seed: int, picks: bool = False) -> StreamResult:
    """One replay on a fresh cluster (its own event loop); ``picks``: the service's
    ``filter_picks_node``."""
    return asyncio.run(_replay(nodes, devices, pods, window, seed, picks))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.sampled_stream", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=positive_ints, default=[5000], help="node counts (default 5000)")
    parser.add_argument("--devices", type=int, default=10, help="GPUs per node (default 10)")
    parser.add_argument("--pods", type=int, default=1000, help="pods per run (default 1000)")
    parser.add_argument("--window", type=int, default=500, help="names per candidate list (default 500)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size (default 3)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--filter-picks-node", action="store_true", help="the service's --filter-picks-node (no prioritize then)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a CI smoke run")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.quick:
        args.nodes, args.devices, args.pods, args.window, args.repeat = [40], 4, 40, 10, 1
    # the service logs every bind at info: not what is measured
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(f"Python {platform.python_version()} ({platform.python_implementation()}), {sys.platform}")
    print()
    print("| nodes | window | pods measured | bound | verb | CPU ms/pod best | median |")
    print("|---:|---:|---:|---:|---|---:|---:|")
    for nodes in args.nodes:
        runs = [
            run_stream(nodes, args.devices, args.pods, args.window, args.seed, args.filter_picks_node)
            for _ in range(args.repeat)
        ]
        for verb in (*VERBS, "total"):
            values = [sum(r.cpu_ms.values()) if verb == "total" else r.cpu_ms[verb] for r in runs]
            print(
                f"| {nodes} | {args.window} | {runs[0].measured} | {runs[0].bound} | {verb} "
                f"| {min(values):.3f} | {statistics.median(values):.3f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
