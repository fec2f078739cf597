"""Manifests and a scheduler loop for classic DRA tests (issue 14, spec/classic-dra.md §1.7).

``schedule`` calls the service as kube-scheduler drives an extender: filter (with the
PostFilter-like recovery), prioritize's best node, bind; an ``Error`` answer or a failed bind is
an attempt that ends, and the pod is tried again after the cluster settled (the drivers and the
publisher have done what they had queued) — the backoff queue without its waiting. It returns
what happened attempt by attempt, so tests assert on the protocol, not only on its end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from extender.core.errors import ExtenderError
from extender.state.service import SchedulingService

ALPHA = "resource.k8s.io/v1alpha3"
DRIVER = "classic.example.com"
CAPACITY = f"classic.dra-extender.io/{DRIVER}"


def classic_node(name: str, capacity: int | None = 2, **labels: str) -> dict[str, Any]:
    """A node where the simulated driver offers ``capacity`` allocations (None: not there)."""
    meta: dict[str, Any] = {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}}
    if capacity is not None:
        meta["annotations"] = {CAPACITY: str(capacity)}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


def classic_class(name: str = "classic", suitable: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if suitable is not None:
        spec["suitableNodes"] = suitable
    return {"apiVersion": ALPHA, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def structured_class(name: str = "gpu") -> dict[str, Any]:
    return {
        "apiVersion": ALPHA,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
    }


def gpu_slice(node: str, count: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": ALPHA,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpus"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}", "basic": {}} for i in range(count)],
        },
    }


def classic_claim(name: str, *, cls: str = "classic", driver: str = DRIVER) -> dict[str, Any]:
    return {
        "apiVersion": ALPHA,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"controller": driver, "devices": {"requests": [{"name": "r", "deviceClassName": cls}]}},
    }


def structured_claim(name: str, cls: str = "gpu") -> dict[str, Any]:
    return {
        "apiVersion": ALPHA,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "r", "deviceClassName": cls}]}},
    }


def allocated_by_driver(claim: dict[str, Any], node: str, *, reserved_for: Sequence[str] = ()) -> dict[str, Any]:
    """``claim`` as the simulated driver leaves it after allocating it for ``node``."""
    claim = {**claim, "metadata": {**claim["metadata"], "finalizers": [f"{DRIVER}/deletion-protection"]}}
    claim["status"] = {
        "allocation": {
            "controller": DRIVER,
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            },
        },
        **(
            {"reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in reserved_for]}
            if reserved_for
            else {}
        ),
    }
    return claim


def pod(name: str, *claims: str, uid: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}"},
        "spec": {
            "containers": [{"name": "main", "image": "busybox"}],
            "resourceClaims": [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)],
        },
    }


def scheduling_context(pod_name: str, owner_uid: str, *, uid: str = "", **spec: Any) -> dict[str, Any]:
    """A PodSchedulingContext named after ``pod_name``, controlled by the pod with ``owner_uid``."""
    meta: dict[str, Any] = {
        "name": pod_name,
        "namespace": "default",
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": owner_uid, "controller": True}
        ],
    }
    if uid:
        meta["uid"] = uid
    return {"apiVersion": ALPHA, "kind": "PodSchedulingContext", "metadata": meta, "spec": spec}


@dataclass
class Attempt:
    """One scheduling attempt: what filter answered, and the bind's node and error if it got there."""

    error: str = ""
    passing: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    node: str = ""
    bind_error: str = ""

    @property
    def bound(self) -> bool:
        return bool(self.node) and not self.bind_error


@dataclass
class Outcome:
    attempts: list[Attempt]

    @property
    def node(self) -> str | None:
        last = self.attempts[-1] if self.attempts else None
        return last.node if last is not None and last.bound else None


async def schedule(
    service: SchedulingService,
    raw_pod: dict[str, Any],
    nodes: Sequence[str],
    *,
    settle: Callable[[], Awaitable[None]],
    attempts: int = 8,
) -> Outcome:
    """Schedule one pod as kube-scheduler would, at most ``attempts`` times (see the module
    docstring). Stops at the first bound attempt or the first one no node passes."""
    meta = raw_pod["metadata"]
    log: list[Attempt] = []
    for _ in range(attempts):
        outcome = await service.filter_and_recover(raw_pod, list(nodes))
        attempt = Attempt(error=outcome.error, passing=list(outcome.node_names))
        attempt.failed = {**outcome.failed, **outcome.unresolvable}
        log.append(attempt)
        if outcome.error:
            await settle()
            continue
        if not outcome.node_names:
            return Outcome(log)
        names, scores = await service.prioritize_cooperatively(raw_pod, outcome.node_names)
        best = max(scores) if scores else 0
        attempt.node = next(n for n, s in zip(names, scores, strict=True) if s == best)
        try:
            await service.bind(meta["namespace"], meta["name"], meta["uid"], attempt.node)
        except ExtenderError as exc:
            attempt.bind_error = exc.reason
            await settle()
            continue
        return Outcome(log)
    return Outcome(log)


async def quiet(*waits: Callable[[], Awaitable[None]], rounds: int = 3) -> None:
    """Run each wait ``rounds`` times with a loop turn between (one party's work wakes another)."""
    for _ in range(rounds):
        for wait in waits:
            await wait()
        await asyncio.sleep(0)
