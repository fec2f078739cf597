"""Gangs on the real control plane: how many are placed, how fast, and what is left half-done,
under the in-tree DynamicResources plugin and under the extender (spec/workloads-and-gangs.md §8).

One control plane (v1.36.3 with ``GenericWorkload``, ``GangScheduling``, ``DRAWorkloadResourceClaims``
and ``scheduling.k8s.io/v1alpha2``), and per profile a fresh copy of the same cluster and the same
gangs (``--seed``):

- nodes of 8 GPUs each, a random number of them h100 and the rest a100 (so nodes differ);
- with ``--fragment P`` each GPU is taken, with probability P, by a running pod outside any gang
  (its claim allocated to that very GPU and the pod bound there directly, so both profiles start
  from the same fragmented cluster);
- gangs of ``--sizes`` members (``minCount`` = size; default 2-4), each member asking one of
  ``--gpus`` GPUs (default 2 or 4) through a template claim, either of any model or h100 only;
  members of both kinds in one gang are what one member at a time gets wrong (kubernetes#138765:
  an "any" member takes the h100s an "h100" member needed).

All pods are created at once; the run ends when every gang is placed or nothing has been bound for
``--quiet`` seconds (``--time-limit`` at most). Reported per profile: gangs placed, members bound,
partial gangs (some members bound, not all: must be 0), GPUs allocated to pods that are not bound at
the end (held idle), time from creation to a gang's last bind (p50 / max), and CPU seconds of
kube-scheduler and the extender over the run. One run per profile, on whatever else the machine
does.

Usage: ``KUBEBUILDER_ASSETS=... python -m bench.gangs [--nodes 12 --gangs 10 --seed 1]``; the
issue's shape: ``--nodes 32 --gangs 5 --sizes 2-16 --gpus 4,8 --fragment 0.15``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import cpu_seconds

GANG_GATES = "GenericWorkload=true,GangScheduling=true,DRAWorkloadResourceClaims=true"
PODGROUPS = "scheduling.k8s.io/v1alpha2"
GPUS_PER_NODE = 8
#: Name prefix of the pods (and claims) that fragment the cluster (``--fragment``).
FILLER = "busy-"


@dataclass(frozen=True)
class Member:
    name: str
    gpus: int
    h100_only: bool


@dataclass(frozen=True)
class Gang:
    name: str
    members: tuple[Member, ...]


@dataclass(frozen=True)
class Workload:
    h100_per_node: tuple[int, ...]
    gangs: tuple[Gang, ...]
    #: per node, the GPU indexes taken by pods outside any gang (``--fragment``)
    taken: tuple[tuple[int, ...], ...] = ()


def workload(
    nodes: int,
    gangs: int,
    seed: int,
    *,
    sizes: tuple[int, int] = (2, 4),
    gpus: tuple[int, ...] = (2, 4),
    fragment: float = 0.0,
) -> Workload:
    rng = random.Random(seed)
    h100 = tuple(rng.randint(0, 4) for _ in range(nodes))
    made = []
    for g in range(gangs):
        size = rng.randint(*sizes)
        members = tuple(_member(f"g{g}-m{m}", rng, gpus) for m in range(size))
        made.append(Gang(f"g{g}", members))
    taken = (
        tuple(tuple(i for i in range(GPUS_PER_NODE) if rng.random() < fragment) for _ in range(nodes))
        if fragment
        else ()
    )
    return Workload(h100, tuple(made), taken)


def _member(name: str, rng: random.Random, gpus: tuple[int, ...]) -> Member:
    """A member of ``gpus`` GPUs (one of them at random), h100 only 40 % of the time when it asks
    at most 4 (a node has at most 4 h100: more could never fit anywhere)."""
    count = rng.choice(gpus)
    h100_only = rng.random() < 0.4
    return Member(name, count, h100_only=h100_only and count <= 4)


@dataclass
class Outcome:
    placed: int = 0
    bound: int = 0
    partial: int = 0
    idle_gpus: int = 0
    times: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


def _populate(scenario: Any, load: Workload, scheduler_name: str) -> None:
    nodes = scenario.nodes(len(load.h100_per_node))
    for node, h100 in zip(nodes, load.h100_per_node, strict=True):
        devices = [
            {"name": f"gpu-{i}", "attributes": {"model": {"string": "h100" if i < h100 else "a100"}}}
            for i in range(GPUS_PER_NODE)
        ]
        scenario.slice(node, devices)
    any_gpu = scenario.device_class("any")
    h100_gpu = scenario.device_class("h100", cel=f'device.attributes["{scenario.driver}"].model == "h100"')
    _fragment(scenario, load, nodes, any_gpu)
    for count in sorted({m.gpus for g in load.gangs for m in g.members}):
        scenario.template(f"any-{count}", any_gpu, count=count)
        scenario.template(f"h100-{count}", h100_gpu, count=count)
    for gang in load.gangs:
        scenario.create(
            {
                "apiVersion": PODGROUPS,
                "kind": "PodGroup",
                "metadata": {"name": gang.name, "namespace": scenario.namespace},
                "spec": {"schedulingPolicy": {"gang": {"minCount": len(gang.members)}}},
            }
        )
    for gang in load.gangs:
        for member in gang.members:
            template = f"{'h100' if member.h100_only else 'any'}-{member.gpus}"
            scenario.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": member.name, "namespace": scenario.namespace},
                    "spec": {
                        "schedulerName": scheduler_name,
                        "schedulingGroup": {"podGroupName": gang.name},
                        "terminationGracePeriodSeconds": 0,
                        "containers": [
                            {
                                "name": "main",
                                "image": "registry.k8s.io/pause:3.10",
                                "resources": {"claims": [{"name": "gpus"}]},
                            }
                        ],
                        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
                    },
                }
            )


def _fragment(scenario: Any, load: Workload, nodes: list[str], device_class: str) -> None:
    """The GPUs ``load.taken`` names, each held by a running pod outside any gang: its claim
    allocated to that GPU and reserved for the pod, the pod bound to the node directly (no
    scheduler decides where they go)."""
    for node, taken in zip(nodes, load.taken, strict=False):
        for index in taken:
            name = f"{FILLER}{node}-{index}"
            scenario.claim(name, device_class)
            made = scenario.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "namespace": scenario.namespace},
                    "spec": {
                        "nodeName": node,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [
                            {
                                "name": "main",
                                "image": "registry.k8s.io/pause:3.10",
                                "resources": {"claims": [{"name": "gpus"}]},
                            }
                        ],
                        "resourceClaims": [{"name": "gpus", "resourceClaimName": name}],
                    },
                }
            )
            result = {"request": "gpus", "driver": scenario.driver, "pool": node, "device": f"gpu-{index}"}
            on_node = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            scenario.admin.merge_patch(
                f"/apis/resource.k8s.io/v1/namespaces/{scenario.namespace}/resourceclaims/{name}/status",
                {
                    "status": {
                        "allocation": {
                            "devices": {"results": [result]},
                            "nodeSelector": {"nodeSelectorTerms": [on_node]},
                        },
                        "reservedFor": [{"resource": "pods", "name": name, "uid": made["metadata"]["uid"]}],
                    }
                },
            )


def _observe(scenario: Any, load: Workload, started: float, quiet: float, limit: float) -> Outcome:
    """Poll until every gang is placed, nothing was bound for ``quiet`` s, or ``limit`` s passed."""
    done: dict[str, float] = {}
    bound_at: dict[str, float] = {}
    members = {m.name for g in load.gangs for m in g.members}
    last_change = time.monotonic()
    while True:
        pods = {p["metadata"]["name"]: p for p in scenario.admin.items(f"/api/v1/namespaces/{scenario.namespace}/pods")}
        now = time.monotonic()
        for name, pod in pods.items():
            if name in members and pod["spec"].get("nodeName") and name not in bound_at:
                bound_at[name] = now
                last_change = now
        for gang in load.gangs:
            if gang.name not in done and all(m.name in bound_at for m in gang.members):
                done[gang.name] = max(bound_at[m.name] for m in gang.members) - started
        if len(done) == len(load.gangs) or now - last_change >= quiet or now - started >= limit:
            break
        time.sleep(0.5)  # polling the API server: the measure is the bind times seen, not this
    out = Outcome(placed=len(done), bound=len(bound_at), times=sorted(done.values()))
    out.partial = sum(1 for g in load.gangs if 0 < sum(m.name in bound_at for m in g.members) < len(g.members))
    for claim in scenario.claims():
        allocation = (claim.get("status") or {}).get("allocation")
        owner = next((r["name"] for r in claim["metadata"].get("ownerReferences") or []), "")
        if allocation and owner not in bound_at and not claim["metadata"]["name"].startswith(FILLER):
            out.idle_gpus += len(allocation["devices"]["results"])
    return out


def _profile(plane: Any, deployment: Any, load: Workload, extender: bool, quiet: float, limit: float) -> Outcome:
    from tests.e2e.harness import IN_TREE, SCHEDULER_NAME, Scenario

    gates = [f"--feature-gates={GANG_GATES}"]
    scenario = Scenario(deployment)
    try:
        if extender:
            pair = deployment.start_pair(scheduler_args=gates)
            assert pair.extender.popen is not None
            pids = {"kube-scheduler": pair.scheduler.popen.pid, "dra-extender": pair.extender.popen.pid}
            stop = lambda: deployment.stop_pair(pair)  # noqa: E731
            name = SCHEDULER_NAME
        else:
            config = {"leaderElection": {"leaderElect": False}, "profiles": [{"schedulerName": IN_TREE}]}
            process = plane.start_scheduler(config, name="kube-scheduler-in-tree", extra_args=gates)
            pids = {"kube-scheduler": process.popen.pid}
            stop = lambda: plane.stop_scheduler("kube-scheduler-in-tree")  # noqa: E731
            name = IN_TREE
        try:
            before = {k: cpu_seconds(pid) for k, pid in pids.items()}
            started = time.monotonic()
            _populate(scenario, load, name)
            outcome = _observe(scenario, load, started, quiet, limit)
            outcome.seconds = time.monotonic() - started
            outcome.cpu = {k: cpu_seconds(pid) - before[k] for k, pid in pids.items()}
            return outcome
        finally:
            stop()
    finally:
        scenario.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=12)
    parser.add_argument("--gangs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sizes", default="2-4", help="members per gang, lowest-highest")
    parser.add_argument("--gpus", default="2,4", help="GPUs a member may ask for, one chosen at random")
    parser.add_argument("--fragment", type=float, default=0.0, help="chance that a GPU is taken beforehand")
    parser.add_argument("--quiet", type=float, default=20.0, help="end after this long without a bind (s)")
    parser.add_argument("--time-limit", type=float, default=180.0, help="end after this long at most (s)")
    args = parser.parse_args(argv)

    from tests.controlplane.assets import AssetsMissing, find_assets
    from tests.controlplane.cluster import FEATURE_GATES, RUNTIME_CONFIG, ControlPlane, Options
    from tests.e2e.harness import Deployment

    try:
        assets = find_assets()
    except AssetsMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    low, _, high = args.sizes.partition("-")
    load = workload(
        args.nodes,
        args.gangs,
        args.seed,
        sizes=(int(low), int(high or low)),
        gpus=tuple(int(g) for g in args.gpus.split(",")),
        fragment=args.fragment,
    )
    options = Options(
        feature_gates=f"{FEATURE_GATES},{GANG_GATES}", runtime_config=f"{RUNTIME_CONFIG},{PODGROUPS}=true"
    )
    results: list[tuple[str, Outcome]] = []
    with (
        tempfile.TemporaryDirectory(prefix="gangs-") as folder,
        ControlPlane(assets, Path(folder), options) as plane,
    ):
        deployment = Deployment(plane)
        for label, extender in (("in-tree", False), ("extender", True)):
            results.append((label, _profile(plane, deployment, load, extender, args.quiet, args.time_limit)))
    members = sum(len(g.members) for g in load.gangs)
    demand = sum(m.gpus for g in load.gangs for m in g.members)
    h100_demand = sum(m.gpus for g in load.gangs for m in g.members if m.h100_only)
    taken = sum(len(t) for t in load.taken)
    print(
        f"{args.nodes} nodes x {GPUS_PER_NODE} GPUs ({sum(load.h100_per_node)} h100, {taken} taken beforehand), "
        f"{args.gangs} gangs of {args.sizes} members asking {args.gpus} GPUs each, {members} members asking "
        f"{demand} GPUs ({h100_demand} h100 only); seed {args.seed}\n"
    )
    print("| profile | gangs placed | members bound | partial gangs | GPUs held idle | time to place p50 / max s "
          "| run s | kube-scheduler CPU s | extender CPU s |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|")
    for label, out in results:
        times = f"{statistics.median(out.times):.1f} / {max(out.times):.1f}" if out.times else "—"
        print(
            f"| {label} | {out.placed}/{args.gangs} | {out.bound}/{members} | {out.partial} | {out.idle_gpus} | "
            f"{times} | {out.seconds:.0f} | {out.cpu.get('kube-scheduler', 0):.1f} | "
            f"{out.cpu['dra-extender']:.1f} |"
            if "dra-extender" in out.cpu
            else f"| {label} | {out.placed}/{args.gangs} | {out.bound}/{members} | {out.partial} | {out.idle_gpus} | "
            f"{times} | {out.seconds:.0f} | {out.cpu.get('kube-scheduler', 0):.1f} | — |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
