"""What a gang that cannot fit costs an idle cluster, on the real control plane.

kube-scheduler v1.36.3 retries a gang whose pass failed back to back whenever it has nothing else to
do: the rejected members go to the backoff queue, which an idle scheduler pops at once
(spec/workloads-and-gangs.md §3.4; ~750 passes a second measured in-tree). This script runs one such
gang (3 members x 2 GPUs, 2 nodes x 2 GPUs: two members fit, minCount is 3) under each profile for
``--seconds`` and reports the CPU each process spent meanwhile, with the extender's filter calls:

- ``in-tree``: kube-scheduler with the DynamicResources plugin, no extender;
- ``extender, no backoff``: deploy/base's profile, the extender with ``--gang-retry-backoff 0``
  (every pass answered with failed nodes: the infeasible answer remembered, planned once);
- ``extender``: the default ``--gang-retry-backoff 3``: after three unchanged passes the members
  are answered ``Error``, which puts the gang into kube-scheduler's error backoff (1 s doubling to
  10 s).

Usage: ``KUBEBUILDER_ASSETS=... python -m bench.gang_idle [--seconds 20]``. Measured CPU comes from
``/proc/<pid>/stat`` of each process; one run per profile, on whatever else the machine does.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import cpu_seconds

GANG_GATES = "GenericWorkload=true,GangScheduling=true,DRAWorkloadResourceClaims=true"
PODGROUPS = "scheduling.k8s.io/v1alpha2"


def _gang(scenario: Any, scheduler_name: str) -> None:
    """2 nodes x 2 GPUs and a gang of 3 members x 2 GPUs (minCount 3): two members fit."""
    nodes = scenario.nodes(2)
    for name in nodes:
        scenario.gpus(name, 2)
    gpu = scenario.device_class()
    scenario.template("two-gpus", gpu, count=2)
    scenario.create(
        {
            "apiVersion": PODGROUPS,
            "kind": "PodGroup",
            "metadata": {"name": "too-big", "namespace": scenario.namespace},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
        }
    )
    for i in range(3):
        scenario.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"w{i}", "namespace": scenario.namespace},
                "spec": {
                    "schedulerName": scheduler_name,
                    "schedulingGroup": {"podGroupName": "too-big"},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"claims": [{"name": "gpus"}]},
                        }
                    ],
                    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}],
                },
            }
        )


def _tried(scenario: Any) -> bool:
    group = scenario.admin.get(f"/apis/{PODGROUPS}/namespaces/{scenario.namespace}/podgroups/too-big")
    return any(c.get("type") == "PodGroupScheduled" for c in (group.get("status") or {}).get("conditions") or [])


def _measure(pids: dict[str, int], seconds: float, filters: Callable[[], int]) -> dict[str, float]:
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    calls = filters()
    started = time.monotonic()
    time.sleep(seconds)  # the measurement window itself: nothing is asserted about time
    elapsed = time.monotonic() - started
    out = {name: (cpu_seconds(pid) - before[name]) / elapsed for name, pid in pids.items()}
    out["filter calls/s"] = (filters() - calls) / elapsed
    return out


def _profile(plane: Any, deployment: Any, extender_args: list[str] | None, seconds: float) -> dict[str, float]:
    """One profile's run: its scheduler (and extender), the gang, the gang tried once, then the
    measurement; everything it made is gone after."""
    from tests.controlplane.api import eventually
    from tests.e2e.harness import IN_TREE, SCHEDULER_NAME, Scenario

    base = {"kube-apiserver": plane.processes["kube-apiserver"].popen.pid, "etcd": plane.processes["etcd"].popen.pid}
    gates = [f"--feature-gates={GANG_GATES}"]
    scenario = Scenario(deployment)
    try:
        if extender_args is None:
            config = {"leaderElection": {"leaderElect": False}, "profiles": [{"schedulerName": IN_TREE}]}
            scheduler = plane.start_scheduler(config, name="kube-scheduler-in-tree", extra_args=gates)
            try:
                _gang(scenario, IN_TREE)
                eventually(lambda: _tried(scenario), what="the gang tried")
                return _measure({**base, "kube-scheduler": scheduler.popen.pid}, seconds, lambda: 0)
            finally:
                plane.stop_scheduler("kube-scheduler-in-tree")
        pair = deployment.start_pair(extender_args=extender_args, scheduler_args=gates)
        try:
            assert pair.extender.popen is not None
            pids = {**base, "kube-scheduler": pair.scheduler.popen.pid, "dra-extender": pair.extender.popen.pid}
            _gang(scenario, SCHEDULER_NAME)
            eventually(lambda: _tried(scenario), what="the gang tried")
            extender = pair.extender
            return _measure(
                pids, seconds, lambda: sum(1 for e in extender.events() if e.get("event") == "filter.decided")
            )
        finally:
            deployment.stop_pair(pair)
    finally:
        scenario.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=20.0, help="measurement window per profile (default 20)")
    args = parser.parse_args(argv)

    from tests.controlplane.assets import AssetsMissing, find_assets
    from tests.controlplane.cluster import FEATURE_GATES, RUNTIME_CONFIG, ControlPlane, Options
    from tests.e2e.harness import Deployment

    try:
        assets = find_assets()
    except AssetsMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    options = Options(
        feature_gates=f"{FEATURE_GATES},{GANG_GATES}", runtime_config=f"{RUNTIME_CONFIG},{PODGROUPS}=true"
    )
    profiles: list[tuple[str, list[str] | None]] = [
        ("in-tree", None),
        ("extender, no backoff", ["--gang-retry-backoff", "0"]),
        ("extender", []),
    ]
    rows: list[tuple[str, dict[str, float]]] = []
    with (
        tempfile.TemporaryDirectory(prefix="gang-idle-") as folder,
        ControlPlane(assets, Path(folder), options) as plane,
    ):
        deployment = Deployment(plane)
        for label, extender_args in profiles:
            rows.append((label, _profile(plane, deployment, extender_args, args.seconds)))
    columns = ["kube-scheduler", "dra-extender", "kube-apiserver", "etcd", "filter calls/s"]
    print(f"One infeasible gang (3 members x 2 GPUs on 2 nodes x 2 GPUs, minCount 3), {args.seconds:g} s per profile;")
    print("CPU in cores (1.0 = one core busy), from /proc/<pid>/stat.\n")
    print("| profile | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for label, values in rows:
        cells = [f"{values[c]:.2f}" if c in values else "—" for c in columns]
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
