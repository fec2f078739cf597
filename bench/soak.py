"""The soak run (docs/reliability.md): many pods through the kube-scheduler model while the API
server misbehaves, then a scan of every claim and pod for anything lost or given twice.

Run from the repository root::

    python -m bench.soak                          # 10,000 one-GPU pods on 1,100 nodes x 10 GPUs
    python -m bench.soak --pods 2000 --nodes 250  # smaller
    python -m bench.soak --quick                  # the CI variant (tests/test_soak.py)

The stack is ``bench.pipeline``'s: the strict fake API server (5 ms on every request but watches)
and the resourceclaim controller model in this process, ``dra-extender serve --kubeconfig`` in a
process of its own, ``bench.scheduler_model`` as kube-scheduler. Every ``--fault-every`` seconds
(or, with ``--fault-every-binds``, every so many pods bound: the same faults per pod on a fast
machine and a slow one, as ``--quick`` paces them) the next fault of a cycle is injected into the fake:

- ``conflicts``: the next 20 claim status writes answer 409 (until the next fault at most);
- ``errors``: the next 20 requests (any, but watches) answer 500 (until the next fault at most);
- ``watches dropped``: every watch is cut (each reflector resumes from its resourceVersion);
- ``relist``: every watch is cut and history compacted (each resumes into a 410 and lists again);
- ``restart``: an API server restart (watches cut, requests in flight dropped, history compacted);
- ``pod deleted``: a bound pod goes away, as one that ran to its end does; kube-controller-manager's
  claim cleanup (``tests/fakes/claim_controller.py``) frees its claim, and the devices go to later pods.

When the model is done (every pod bound, or given up after 1000 attempts, or the time limit) the
faults stop, the extender is given time to settle (its holds expire, its ledger drains), and the
cluster is scanned. Printed: the run's figures and the scan's counts, which must all be 0 but the
bound pods. ``--json`` writes both.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.pipeline import Stack, Workload, extender_metrics, kube_stack, run_model, workload_objects
from bench.scheduler_model import ModelReport, ModelSettings
from tests.fakes.claim_controller import ReservationController

__all__ = ["FAULTS", "Scan", "main", "scan", "soak"]

FAULTS = ("conflicts", "errors", "watches dropped", "relist", "restart", "pod deleted")


@dataclass
class Scan:
    """What the cluster looks like afterwards. Everything but ``pods_bound`` must be 0."""

    pods: int = 0
    pods_deleted: int = 0
    pods_bound: int = 0
    pods_unbound: int = 0
    devices_allocated_twice: int = 0
    pods_bound_without_their_claims: int = 0
    reservations_for_missing_pods: int = 0
    claims_allocated_for_nobody: int = 0
    ledger_entries: int = -1
    problems: list[str] = field(default_factory=list)

    def clean(self) -> bool:
        return (
            self.pods_unbound
            == self.devices_allocated_twice
            == self.pods_bound_without_their_claims
            == self.reservations_for_missing_pods
            == self.claims_allocated_for_nobody
            == self.ledger_entries
            == 0
        )


def _claim_names(pod: dict[str, Any]) -> list[str]:
    """The pod's claims by name: direct ones, and template ones from its status."""
    statuses = {
        s.get("name"): s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    names = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = entry.get("resourceClaimName") or statuses.get(entry.get("name"))
        names.append(name or f"<{entry.get('name')} not created>")
    return names


def scan(fake: Any, ledger_entries: int) -> Scan:
    """Every claim and pod in the fake API server, checked (see ``Scan``)."""
    claims = {c["metadata"]["name"]: c for c in fake.objects("ResourceClaim", group="resource.k8s.io")}
    pods = fake.objects("Pod")
    by_uid = {p["metadata"]["uid"]: p for p in pods}
    result = Scan(pods=len(pods), ledger_entries=ledger_entries)
    holders: dict[tuple[str, str, str], str] = {}
    for name, claim in claims.items():
        status = claim.get("status") or {}
        allocation = status.get("allocation")
        reserved = status.get("reservedFor") or []
        for ref in reserved:
            if ref.get("uid") not in by_uid:
                result.reservations_for_missing_pods += 1
                result.problems.append(f"claim {name} reserved for missing pod {ref.get('name')}")
        if allocation and not reserved:
            result.claims_allocated_for_nobody += 1
            result.problems.append(f"claim {name} allocated, reserved for nobody")
        for device in ((allocation or {}).get("devices") or {}).get("results") or ():
            key = (device["driver"], device["pool"], device["device"])
            if key in holders:
                result.devices_allocated_twice += 1
                result.problems.append(f"{'/'.join(key)} given to {holders[key]} and {name}")
            holders[key] = name
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            result.pods_unbound += 1
            continue
        result.pods_bound += 1
        uid = pod["metadata"]["uid"]
        for name in _claim_names(pod):
            claim = claims.get(name)
            status = (claim or {}).get("status") or {}
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
            ok = (
                claim is not None
                and any(ref.get("uid") == uid for ref in status.get("reservedFor") or [])
                and bool(results)
                and all(r["pool"] == node for r in results)  # cluster_gen: a node's pool is its name
            )
            if not ok:
                result.pods_bound_without_their_claims += 1
                result.problems.append(f"pod {pod['metadata']['name']} bound to {node} without claim {name}")
    return result


def _node_name(pod: dict[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


class _Bindings:
    """Counts the bindings the fake API server commits (a pod's ``spec.nodeName`` set), so that
    faults can be paced by the run's progress instead of by the clock: with a fault every so many
    seconds, a fast machine is done before every kind of fault came, and a slow one meets many
    faults per pod."""

    def __init__(self, fake: Any) -> None:
        self.fake = fake
        self.count = 0
        self._changed = asyncio.Event()
        fake.storage.subscribe(self._on_change)

    def close(self) -> None:
        self.fake.storage.unsubscribe(self._on_change)

    def _on_change(self, change: Any) -> None:
        if change.collection != ("", "pods") or change.type == "DELETED":
            return
        if _node_name(change.obj) and not _node_name(change.prev or {}):
            self.count += 1
            self._changed.set()

    async def reach(self, count: int, stop: asyncio.Event) -> None:
        """Until ``count`` bindings have been committed, or ``stop`` is set."""
        while self.count < count and not stop.is_set():
            self._changed.clear()
            waits = [asyncio.ensure_future(self._changed.wait()), asyncio.ensure_future(stop.wait())]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()


async def _chaos(
    stack: Stack,
    every: float,
    injected: Counter[str],
    stop: asyncio.Event,
    deleted: list[str],
    *,
    every_binds: int = 0,
) -> None:
    """Inject the next fault every ``every`` seconds or, with ``every_binds``, each time that many
    more pods have been bound, until ``stop``."""
    fake = stack.fake
    assert fake is not None
    bindings = _Bindings(fake) if every_binds > 0 else None
    window: Any = None  # the failing requests of the last fault: at most 20, until the next fault
    try:
        for fault in _cycle():
            if bindings is not None:
                await bindings.reach(bindings.count + every_binds, stop)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), every)
            if window is not None:
                window.times = window.hits  # spent: each window ends when the next fault comes
                window = None
            if stop.is_set():
                return
            if fault == "conflicts":
                window = fake.fail("PUT", r"/resourceclaims/[^/]+/status$", status=409, times=20)
            elif fault == "errors":
                window = fake.fail(None, "", status=500, times=20, watch=False, message="injected soak fault")
            elif fault == "watches dropped":
                fake.drop_watches()
            elif fault == "relist":
                fake.drop_watches()
                fake.compact()
            elif fault == "restart":
                fake.restart()
            else:
                # a pod that ran to its end and went away: the resourceclaim controller frees its claim
                bound = [p for p in fake.objects("Pod") if (p.get("spec") or {}).get("nodeName")]
                if not bound:
                    continue
                victim = bound[len(bound) // 2]["metadata"]
                fake.delete_object("Pod", victim["namespace"], victim["name"])
                deleted.append(victim["name"])
            injected[fault] += 1
    finally:
        if bindings is not None:
            bindings.close()


def _cycle() -> Any:
    while True:
        yield from FAULTS


async def _ledger_entries(port: int) -> int:
    """The extender's in-flight ledger entries now (-1 if ``/metrics`` does not say)."""
    return int((await extender_metrics(port)).get("dra_extender_ledger_entries", -1))


async def _settled_ledger(port: int, timeout: float) -> int:
    """The extender's in-flight entries once they drain (or whatever is left at ``timeout``)."""
    deadline = time.monotonic() + timeout
    entries = await _ledger_entries(port)
    while entries != 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        entries = await _ledger_entries(port)
    return entries


async def soak(
    workload: Workload,
    model: ModelSettings,
    *,
    fault_every: float,
    latency: float,
    settle_seconds: float,
    fault_every_binds: int = 0,
) -> tuple[ModelReport, Scan, Counter[str]]:
    """The run and the scan; a fault every ``fault_every`` seconds, or every ``fault_every_binds``
    pods bound when that is set."""
    injected: Counter[str] = Counter()
    deleted: list[str] = []
    objects = workload_objects(workload)
    async with kube_stack(objects, latency=latency, in_process=False, seed=workload.seed) as stack:
        del objects
        assert stack.fake is not None
        async with ReservationController(stack.fake, interval=0.5) as cleaner:
            stop = asyncio.Event()
            chaos = asyncio.create_task(
                _chaos(stack, fault_every, injected, stop, deleted, every_binds=fault_every_binds)
            )
            try:
                report, _, _ = await run_model(stack, model)
            finally:
                stop.set()
                await chaos
            entries = await _settled_ledger(stack.port, settle_seconds)
            await cleaner.sweep()  # the deleted pods' claims are freed by now
        result = scan(stack.fake, entries)
        result.pods_deleted = len(deleted)
        return report, result, injected


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1100, help="nodes of 10 GPUs (default 1100)")
    parser.add_argument("--claims", choices=("direct", "template"), default="direct")
    parser.add_argument("--fault-every", type=float, default=2.0, help="seconds between faults (default 2)")
    parser.add_argument(
        "--fault-every-binds",
        type=int,
        default=0,
        help="a fault every N pods bound instead of every --fault-every seconds: the same faults per pod on "
        "any machine (default 0: by seconds)",
    )
    parser.add_argument("--latency", type=float, default=0.005, help="API latency, seconds (default 0.005)")
    parser.add_argument("--time-limit", type=float, default=900.0, help="the model's time limit (default 900 s)")
    parser.add_argument("--settle-seconds", type=float, default=30.0, help="wait for the ledger to drain")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="500 pods on 60 nodes, a fault every 10 pods bound")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.quick:
        # Faults paced by bindings, not seconds (about 50, 8 of each kind): a fast machine
        # still meets every kind of fault, a slow one no more per pod than a fast one.
        args.pods, args.nodes, args.fault_every_binds, args.time_limit = 500, 60, 10, 300.0
    workload = Workload(nodes=args.nodes, devices=10, pods=args.pods, claims=args.claims, seed=args.seed)
    # A pod is given up only after many attempts: under a fault every few seconds (and
    # SchedulerPopFromBackoffQ retrying at once when the queue is empty), 50 can go in one burst.
    model = ModelSettings(binds_in_flight=16, time_limit=args.time_limit, max_attempts=1000, seed=args.seed)
    report, result, injected = asyncio.run(
        soak(
            workload,
            model,
            fault_every=args.fault_every,
            latency=args.latency,
            settle_seconds=args.settle_seconds,
            fault_every_binds=args.fault_every_binds,
        )
    )
    summary = report.summary()
    pace = f"{args.fault_every_binds} pods bound" if args.fault_every_binds > 0 else f"{args.fault_every:g} s"
    print(
        f"Python {platform.python_version()}, {args.pods} pods ({args.claims} claims) on {args.nodes} nodes x 10 GPUs, "
        f"API latency {args.latency * 1000:g} ms, a fault every {pace}"
    )
    print()
    print("| run | value |")
    print("|---|---:|")
    for label, value in (
        ("pods bound", f"{summary['bound']} of {summary['pods']}"),
        ("elapsed s", summary["elapsed_s"]),
        ("pods/s", summary["pods_per_s"]),
        ("attempts per pod", summary["attempts_per_pod"]),
        ("pods with a failed attempt", summary["pods_with_failed_attempt"]),
        ("given up", summary["given_up"]),
        ("latency p50 / p99 s", f"{summary['latency_p50_s']} / {summary['latency_p99_s']}"),
        *((f"faults: {name}", injected[name]) for name in FAULTS),
        *((f"failed attempts: {cause}", n) for cause, n in summary["failed_attempts"].items()),
    ):
        print(f"| {label} | {value} |")
    print()
    print("| scan | count |")
    print("|---|---:|")
    for label, value in (
        ("pods deleted during the run", result.pods_deleted),
        ("pods bound", result.pods_bound),
        ("pods not bound", result.pods_unbound),
        ("devices allocated twice", result.devices_allocated_twice),
        ("pods bound without their claims", result.pods_bound_without_their_claims),
        ("reservations for pods that do not exist", result.reservations_for_missing_pods),
        ("claims allocated, reserved for nobody", result.claims_allocated_for_nobody),
        ("ledger entries left", result.ledger_entries),
    ):
        print(f"| {label} | {value} |")
    for problem in result.problems[:20]:
        print(f"- {problem}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"run": summary, "faults": dict(injected), "scan": result.__dict__}, fh, indent=2)
    return 0 if result.clean() else 1


if __name__ == "__main__":
    sys.exit(main())
