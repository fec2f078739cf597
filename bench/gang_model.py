"""Gangs under the kube-scheduler model's group cycles (bench/scheduler_model.py): what the real
control plane cannot show (spec/workloads-and-gangs.md §8).

The extender runs as ``dra-extender serve --cluster`` (the embedded backend, a process of its own,
so its CPU is its own) on the workload of ``bench.gangs`` (``--nodes`` nodes of 8 GPUs, some h100;
``--gangs`` gangs of 2-4 members asking 2 or 4 GPUs, some h100 only; ``--seed``), each member with
a claim of its own. Two runs:

- **placement**: every gang's members through group cycles, all pods there at the start; reported:
  gangs placed, group passes (and those that placed their gang), extender calls per member per pass,
  time from a gang's first filter to its minCount-th bind (p50 / max), pods/s, extender CPU;
- **infeasible**: one gang that never fits (3 members of 8 GPUs on 2 nodes) for ``--seconds``: the
  passes the model runs (an idle kube-scheduler pops a rejected member from the backoff queue at
  once), the extender's filter calls per second and its CPU, with the default
  ``--gang-retry-backoff`` (``Error`` after 3 unchanged passes: kube-scheduler's error backoff) and
  with 0 (never).

``--sizes``, ``--gpus`` and ``--fragment`` shape the workload as for ``bench.gangs``. One run each,
on whatever else the machine does. Usage: ``python -m bench.gang_model [--nodes 12 --gangs 10
--seed 1 --seconds 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from bench.common import percentile
from bench.gangs import GPUS_PER_NODE, Workload, workload
from bench.pipeline import embedded_stack, run_model
from bench.scheduler_model import ModelReport, ModelSettings

SETTINGS = ModelSettings(tie_break="random", in_tree="balanced", binds_in_flight=16, time_limit=300)


def objects(load: Workload, *, namespace: str = "default") -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The cluster (nodes, slices, classes, claims, PodGroups, pods) and the gangs' minCounts."""
    out: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        _device_class("any", 'device.driver == "gpu.example.com"'),
        _device_class(
            "h100", 'device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].model == "h100"'
        ),
    ]
    for index, h100 in enumerate(load.h100_per_node):
        node = f"node-{index}"
        out.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        devices = [
            {"name": f"gpu-{i}", "attributes": {"model": {"string": "h100" if i < h100 else "a100"}}}
            for i in range(GPUS_PER_NODE)
        ]
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-gpus"},
                "spec": {
                    "driver": "gpu.example.com",
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    for index, taken in enumerate(load.taken):
        for gpu in taken:
            out += _filler(f"node-{index}", gpu, namespace)
    groups = {}
    for gang in load.gangs:
        groups[f"{namespace}/{gang.name}"] = len(gang.members)
        out.append(
            {
                "apiVersion": "scheduling.k8s.io/v1alpha2",
                "kind": "PodGroup",
                "metadata": {"name": gang.name, "namespace": namespace, "uid": f"uid-{gang.name}"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": len(gang.members)}}},
            }
        )
        for member in gang.members:
            out.append(_claim(member.name, member.gpus, "h100" if member.h100_only else "any", namespace))
            out.append(_pod(member.name, gang.name, namespace))
    return out, groups


def _filler(node: str, gpu: int, namespace: str) -> list[dict[str, Any]]:
    """A running pod outside any gang holding GPU ``gpu`` of ``node`` (``bench.gangs --fragment``)."""
    name = f"busy-{node}-{gpu}"
    claim = _claim(name, 1, "any", namespace)
    claim["metadata"]["name"] = name
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpus", "driver": "gpu.example.com", "pool": node, "device": f"gpu-{gpu}"}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            },
        },
        "reservedFor": [{"resource": "pods", "name": name, "uid": f"uid-{name}"}],
    }
    pod = _pod(name, "", namespace)
    pod["spec"].pop("schedulingGroup")
    pod["spec"]["nodeName"] = node
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": name}]
    return [claim, pod]


def _device_class(name: str, expression: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def _claim(name: str, count: int, device_class: str, namespace: str) -> dict[str, Any]:
    exact = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"{name}-gpus", "namespace": namespace, "uid": f"uid-{name}-gpus"},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": exact}]}},
    }


def _pod(name: str, group: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {
            "schedulingGroup": {"podGroupName": group},
            "containers": [{"name": "main", "image": "pause", "resources": {"claims": [{"name": "gpus"}]}}],
            "resourceClaims": [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}],
        },
    }


async def _run(
    cluster: list[dict[str, Any]], groups: dict[str, int], settings: ModelSettings, args: Sequence[str]
) -> tuple[ModelReport, float]:
    """One model run on a fresh extender process: the report and the extender's CPU seconds."""
    async with embedded_stack(cluster, in_process=False, extender_args=args) as stack:
        # the pods bound beforehand (``--fragment``) are no work for the scheduler
        stack = dataclasses.replace(stack, pods=[p for p in stack.pods if not p["spec"].get("nodeName")])
        report, _, cpu = await run_model(stack, settings, groups=groups)
        return report, cpu.get("server", 0.0)


def _placement_row(report: ModelReport, cpu: float, gangs: int) -> str:
    times = report.gang_place_s
    place = f"{percentile(times, 50):.2f} / {max(times):.2f}" if times else "—"
    return (
        f"| {report.gangs_placed}/{gangs} | {report.bound}/{report.pods} | {report.gang_passes} "
        f"({report.gang_passes_placed} placed) | {report.calls_per_member_per_pass:.2f} | {place} | "
        f"{report.pods_per_s:.1f} | {cpu:.2f} |"
    )


async def main_async(
    nodes: int,
    gangs: int,
    seed: int,
    seconds: float,
    *,
    sizes: tuple[int, int] = (2, 4),
    gpus: tuple[int, ...] = (2, 4),
    fragment: float = 0.0,
) -> None:
    load = workload(nodes, gangs, seed, sizes=sizes, gpus=gpus, fragment=fragment)
    cluster, groups = objects(load)
    members = sum(len(g.members) for g in load.gangs)
    print(
        f"placement: {nodes} nodes x {GPUS_PER_NODE} GPUs ({sum(load.h100_per_node)} h100, "
        f"{sum(len(t) for t in load.taken)} taken beforehand), {gangs} gangs, "
        f"{members} members; seed {seed}\n"
    )
    print("| gangs placed | members bound | group passes | extender calls per member per pass | "
          "first filter to minCount-th bind p50 / max s | pods/s | extender CPU s |")  # fmt: skip
    print("|---:|---:|---|---:|---|---:|---:|")
    report, cpu = await _run(cluster, groups, SETTINGS, [])
    print(_placement_row(report, cpu, gangs))

    big = Workload((0, 0), ())
    infeasible, _ = objects(big)
    infeasible += [
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "big", "namespace": "default", "uid": "uid-big"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
        }
    ]
    for i in range(3):
        infeasible += [_claim(f"big-{i}", GPUS_PER_NODE, "any", "default"), _pod(f"big-{i}", "big", "default")]
    settings = ModelSettings(time_limit=seconds, max_attempts=10**9)
    print(f"\ninfeasible: one gang of 3 x {GPUS_PER_NODE} GPUs on 2 nodes, {seconds:.0f} s\n")
    print("| --gang-retry-backoff | group passes | passes/s | extender filter calls/s | extender CPU s |")
    print("|---|---:|---:|---:|---:|")
    for label, flag in (("3 (default)", []), ("0 (never Error)", ["--gang-retry-backoff", "0"])):
        report, cpu = await _run(infeasible, {"default/big": 3}, settings, flag)
        elapsed = max(report.elapsed_s, 1e-9)
        print(
            f"| {label} | {report.gang_passes} | {report.gang_passes / elapsed:.1f} | "
            f"{report.gang_filters / elapsed:.1f} | {cpu:.2f} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=12)
    parser.add_argument("--gangs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=10.0, help="how long the infeasible gang runs")
    parser.add_argument("--sizes", default="2-4", help="members per gang, lowest-highest")
    parser.add_argument("--gpus", default="2,4", help="GPUs a member may ask for, one chosen at random")
    parser.add_argument("--fragment", type=float, default=0.0, help="chance that a GPU is taken beforehand")
    args = parser.parse_args(argv)
    low, _, high = args.sizes.partition("-")
    sizes = (int(low), int(high or low))
    gpus = tuple(int(g) for g in args.gpus.split(","))
    asyncio.run(
        main_async(args.nodes, args.gangs, args.seed, args.seconds, sizes=sizes, gpus=gpus, fragment=args.fragment)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
