"""A simulated classic DRA driver controller: the driver's side of the negotiation (spec/classic-dra.md §1.4).

In Kubernetes 1.26-1.31 a claim with ``spec.controller`` is allocated by that driver's own
control-plane controller, built on the ``k8s.io/dynamic-resource-allocation/controller`` library.
``ClassicDriver`` follows that library's state machine so that the whole negotiation runs without a
cluster (``serve --cluster`` demos, curl, black-box tests), and the tests' fake API server runs the
same machine over HTTP:

- a PodSchedulingContext with ``potentialNodes`` or ``selectedNode`` is examined: the pod is read
  (a pod being deleted, or one that does not control the context, is skipped); its unallocated
  claims whose ``spec.controller`` is this driver are collected (every requested class must exist);
  if a node is selected and suits all of them, they are allocated for it (the finalizer
  ``<driver>/deletion-protection`` first, then one status write with the allocation, its
  ``controller`` and, unless ``set_reserved_for`` is off, the pod in ``reservedFor``); then each
  claim's ``status.resourceClaims[]`` entry lists the potential nodes unsuitable for it (at most
  128, the selected node kept). The context is examined again every ``recheck_seconds`` while it
  exists (the library's 30 s), and whenever it, a claim or a pod changes;
- a claim with ``deallocationRequested`` or a ``deletionTimestamp``, no consumers and the driver's
  finalizer is deallocated: the allocation and the flag cleared in one status write, then the
  finalizer removed. The driver never moves an allocation by itself.

The capacity model is the e2e test driver's (DRV131): a node offers ``capacity`` allocations of
the driver — the value of the node annotation ``classic.dra-extender.io/<driver>`` (an integer;
no annotation: the driver does not run there) — and a node is unsuitable for a pod when the
claims already allocated there plus all of the pod's claims of the driver exceed it. An allocation
is pinned to its node by ``nodeSelector`` ``metadata.name In [node]`` (a field selector: it needs no
hostname label) and carries an opaque config naming the node and slot.

Knobs for tests: ``set_reserved_for``, ``allocate_delay``, ``allocate_gate`` (an event Allocate
waits for), ``fail_allocation`` (an error text), ``recheck_seconds``; ``stop()`` / ``start()`` play
a crash and a restart (the state lives only in the cluster, so a restarted driver carries on).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from extender.core.errors import ExtenderError

__all__ = [
    "CAPACITY_ANNOTATION_PREFIX",
    "MAX_NODES",
    "ClassicDriver",
    "DriverCluster",
    "DriverKnobs",
    "classic_capacity",
    "driver_finalizer",
]

log = structlog.get_logger()

#: ``classic.dra-extender.io/<driver>: "<allocations>"`` on a Node: the simulated driver's capacity.
CAPACITY_ANNOTATION_PREFIX = "classic.dra-extender.io/"
#: ``PodSchedulingNodeListMaxSize``.
MAX_NODES = 128


def driver_finalizer(driver: str) -> str:
    return f"{driver}/deletion-protection"


def classic_capacity(node: Mapping[str, Any], driver: str) -> int:
    """How many allocations of ``driver`` the node offers (0: the driver does not run there)."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(CAPACITY_ANNOTATION_PREFIX + driver)
    try:
        return max(0, int(str(text))) if text is not None else 0
    except ValueError:
        return 0


class DriverCluster(Protocol):
    """What the driver reads and writes. Reads are of a cache (returned objects are not changed
    by the driver); writes behave like the API server's PUTs and raise ``ExtenderError``."""

    def read(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None: ...

    def objects(self, kind: str) -> Iterable[Mapping[str, Any]]: ...

    async def update_claim(self, raw: dict[str, Any]) -> dict[str, Any]: ...

    async def update_claim_status(self, raw: dict[str, Any]) -> dict[str, Any]: ...

    async def update_context_status(self, raw: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(slots=True)
class DriverKnobs:
    set_reserved_for: bool = True
    #: seconds Allocate takes
    allocate_delay: float = 0.0
    #: when set, Allocate first waits until this event is set: a driver slow for exactly as long as
    #: the test says, on any machine (a delay in seconds races whatever it is compared with)
    allocate_gate: asyncio.Event | None = None
    #: when set, Allocate fails with this text
    fail_allocation: str = ""
    #: how often a context is examined again while it exists
    recheck_seconds: float = 30.0
    #: seconds before a failed item is tried again
    retry_seconds: float = 0.2


@dataclass(slots=True)
class _PodClaim:
    pod_claim_name: str
    claim: Mapping[str, Any]


@dataclass
class DriverStats:
    allocations: int = 0
    deallocations: int = 0
    status_writes: int = 0
    errors: list[str] = field(default_factory=list)


class ClassicDriver:
    """One driver's controller; see the module docstring. ``notify(kind, namespace, name)`` tells it
    of a change; it works through its queue in a task of its own."""

    def __init__(self, cluster: DriverCluster, name: str, knobs: DriverKnobs | None = None) -> None:
        self.cluster = cluster
        self.name = name
        self.knobs = knobs if knobs is not None else DriverKnobs()
        self.stats = DriverStats()
        self._queue: dict[tuple[str, str], None] = {}
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._busy = False
        self.running = True

    # --- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        """(Re)start: everything is looked at again, as after a restart's initial list."""
        self.running = True
        for context in self.cluster.objects("PodSchedulingContext"):
            self._enqueue("context", _key(context))
        for claim in self.cluster.objects("ResourceClaim"):
            self._enqueue("claim", _key(claim))

    async def stop(self) -> None:
        """Stop working (a crash: the queue is lost, the cluster keeps the state)."""
        self.running = False
        self._queue.clear()
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def idle(self) -> None:
        """Wait until the queue is empty and nothing is being worked on (tests)."""
        while self._queue or (self._task is not None and self._busy):
            await asyncio.sleep(0.005)

    def notify(self, kind: str, namespace: str | None, name: str) -> None:
        if not self.running:
            return
        key = f"{namespace}/{name}" if namespace else name
        if kind == "PodSchedulingContext":
            self._enqueue("context", key)
        elif kind == "ResourceClaim":
            self._enqueue("claim", key)
            # a claim allocated or freed changes what suits other pods: look at every context
            for context in self.cluster.objects("PodSchedulingContext"):
                self._enqueue("context", _key(context))
        elif kind == "Pod":
            self._enqueue("context", key)

    def _enqueue(self, kind: str, key: str) -> None:
        self._queue[(kind, key)] = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # picked up when the driver's task first runs
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run(), name=f"classic driver {self.name}")
        assert self._wake is not None
        self._wake.set()

    async def _run(self) -> None:
        assert self._wake is not None
        while self.running:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            item = next(iter(self._queue))
            del self._queue[item]
            self._busy = True
            try:
                await self._sync(*item)
            except asyncio.CancelledError:
                raise
            except ExtenderError as exc:
                self._failed(item, exc.reason)
            except Exception as exc:  # a driver bug must not end the controller
                log.exception("classic_driver.sync_failed", driver=self.name, item=item)
                self._failed(item, repr(exc))
            finally:
                self._busy = False

    def _failed(self, item: tuple[str, str], reason: str) -> None:
        self.stats.errors.append(f"{item[0]} {item[1]}: {reason}")
        del self.stats.errors[:-50]
        log.info("classic_driver.retry", driver=self.name, item=f"{item[0]} {item[1]}", reason=reason)
        self._later(item, self.knobs.retry_seconds)

    def _later(self, item: tuple[str, str], seconds: float) -> None:
        old = self._timers.pop(item, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self._timers[item] = loop.call_later(seconds, self._fire, item)

    def _fire(self, item: tuple[str, str]) -> None:
        self._timers.pop(item, None)
        if self.running:
            self._enqueue(*item)

    async def _sync(self, kind: str, key: str) -> None:
        namespace, _, name = key.rpartition("/")
        if kind == "claim":
            await self._sync_claim(namespace, name)
        else:
            await self._sync_context(namespace, name)

    # --- claims: deallocation -------------------------------------------------------------------------

    async def _sync_claim(self, namespace: str, name: str) -> None:
        claim = self.cluster.read("ResourceClaim", namespace, name)
        if claim is None:
            return
        status = claim.get("status") or {}
        meta = claim.get("metadata") or {}
        if status.get("reservedFor"):
            return
        finalizer = driver_finalizer(self.name)
        if finalizer not in (meta.get("finalizers") or ()):
            return
        if not (meta.get("deletionTimestamp") or status.get("deallocationRequested")):
            return
        new = copy.deepcopy(dict(claim))
        new_status = new.setdefault("status", {})
        if new_status.get("allocation") or new_status.get("deallocationRequested"):
            new_status.pop("allocation", None)
            new_status.pop("deallocationRequested", None)
            new = await self.cluster.update_claim_status(new)
            self.stats.deallocations += 1
            log.info("classic_driver.deallocated", driver=self.name, claim=f"{namespace}/{name}")
        new["metadata"]["finalizers"] = [f for f in new["metadata"].get("finalizers") or () if f != finalizer]
        await self.cluster.update_claim(new)

    # --- contexts: unsuitable nodes and allocation ---------------------------------------------------

    async def _sync_context(self, namespace: str, name: str) -> None:
        context = self.cluster.read("PodSchedulingContext", namespace, name)
        if context is None or (context.get("metadata") or {}).get("deletionTimestamp"):
            return
        self._later(("context", f"{namespace}/{name}"), self.knobs.recheck_seconds)
        spec = context.get("spec") or {}
        selected: str = spec.get("selectedNode") or ""
        potential: list[str] = list(spec.get("potentialNodes") or ())
        if not selected and not potential:
            return
        pod = self.cluster.read("Pod", namespace, name)
        if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
            return
        if not _controls(context, (pod.get("metadata") or {}).get("uid")):
            return  # stale: the context of an older pod of that name
        claims = self._pending_claims(pod)
        if not claims:
            return
        checked = potential + ([selected] if selected and selected not in potential else [])
        unsuitable = self._unsuitable(checked, claims) if potential else set()
        if selected and selected not in unsuitable:
            await self._allocate(pod, claims, selected)
        await self._publish_unsuitable(context, claims, sorted(unsuitable), selected)

    def _pending_claims(self, pod: Mapping[str, Any]) -> list[_PodClaim]:
        """The pod's unallocated claims this driver allocates (the library's checks: template
        claims through the pod's status and owned by the pod, every class present)."""
        meta = pod.get("metadata") or {}
        namespace, uid = meta.get("namespace") or "default", meta.get("uid")
        statuses = {
            e.get("name"): e.get("resourceClaimName")
            for e in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
            if isinstance(e, dict)
        }
        found: list[_PodClaim] = []
        for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
            pod_claim_name = entry.get("name")
            claim_name = entry.get("resourceClaimName") or statuses.get(pod_claim_name)
            if not claim_name:
                continue
            claim = self.cluster.read("ResourceClaim", namespace, claim_name)
            if claim is None:
                continue
            if entry.get("resourceClaimTemplateName") and not _controls(claim, uid):
                continue
            if (claim.get("spec") or {}).get("controller") != self.name:
                continue
            if (claim.get("status") or {}).get("allocation"):
                continue
            for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ():
                class_name = request.get("deviceClassName")
                if class_name and self.cluster.read("DeviceClass", None, class_name) is None:
                    raise ExtenderError(
                        f"pod claim {pod_claim_name}: claim {namespace}/{claim_name}: request "
                        f"{request.get('name')}: class {class_name}: not found"
                    )
            found.append(_PodClaim(str(pod_claim_name), claim))
        return found

    def _used(self) -> dict[str, int]:
        """Allocations of this driver per node."""
        used: dict[str, int] = {}
        for claim in self.cluster.objects("ResourceClaim"):
            allocation = (claim.get("status") or {}).get("allocation") or {}
            if allocation.get("controller") != self.name:
                continue
            node = _pinned_node(allocation)
            if node:
                used[node] = used.get(node, 0) + 1
        return used

    def _capacity(self, node: str) -> int:
        raw = self.cluster.read("Node", None, node)
        return 0 if raw is None else classic_capacity(raw, self.name)

    def _unsuitable(self, nodes: list[str], claims: list[_PodClaim]) -> set[str]:
        used = self._used()
        return {n for n in nodes if used.get(n, 0) + len(claims) > self._capacity(n)}

    async def _allocate(self, pod: Mapping[str, Any], claims: list[_PodClaim], node: str) -> None:
        if self.knobs.allocate_gate is not None:
            await self.knobs.allocate_gate.wait()
        if self.knobs.allocate_delay:
            await asyncio.sleep(self.knobs.allocate_delay)
        if self.knobs.fail_allocation:
            raise ExtenderError(self.knobs.fail_allocation)
        meta = pod.get("metadata") or {}
        errors: list[str] = []
        for entry in claims:
            claim_meta = entry.claim.get("metadata") or {}
            current = self.cluster.read("ResourceClaim", claim_meta.get("namespace"), claim_meta.get("name", ""))
            if current is None or (current.get("status") or {}).get("allocation"):
                continue
            used = self._used().get(node, 0)
            if used + 1 > self._capacity(node):
                errors.append(f'claim {entry.pod_claim_name}: resources exhausted on node "{node}"')
                continue
            new = copy.deepcopy(dict(current))
            finalizers = new["metadata"].setdefault("finalizers", [])
            if driver_finalizer(self.name) not in finalizers:
                finalizers.append(driver_finalizer(self.name))
                new = await self.cluster.update_claim(new)
            status = new.setdefault("status", {})
            status["allocation"] = {
                "devices": {
                    "config": [
                        {
                            "source": "FromClaim",
                            "opaque": {"driver": self.name, "parameters": {"node": node, "slot": used}},
                        }
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
                "controller": self.name,
            }
            if self.knobs.set_reserved_for:
                status.setdefault("reservedFor", []).append(
                    {"resource": "pods", "name": meta.get("name"), "uid": meta.get("uid")}
                )
            await self.cluster.update_claim_status(new)
            self.stats.allocations += 1
            log.info("classic_driver.allocated", driver=self.name, claim=_key(new), node=node)
        if errors:
            raise ExtenderError("; ".join(errors))

    async def _publish_unsuitable(
        self, context: Mapping[str, Any], claims: list[_PodClaim], unsuitable: list[str], selected: str
    ) -> None:
        if len(unsuitable) > MAX_NODES:
            keep = [selected] if selected in unsuitable else []
            unsuitable = keep + [n for n in unsuitable if n != selected][: MAX_NODES - len(keep)]
        new = copy.deepcopy(dict(context))
        entries: list[dict[str, Any]] = list((new.get("status") or {}).get("resourceClaims") or ())
        changed = False
        for entry in claims:
            wanted = {"name": entry.pod_claim_name, "unsuitableNodes": list(unsuitable)}
            if not unsuitable:
                wanted.pop("unsuitableNodes")
            position = next((i for i, e in enumerate(entries) if e.get("name") == entry.pod_claim_name), None)
            if position is None:
                entries.append(wanted)
                changed = True
            elif entries[position] != wanted:
                entries[position] = wanted
                changed = True
        if not changed:
            return
        new.setdefault("status", {})["resourceClaims"] = entries
        await self.cluster.update_context_status(new)
        self.stats.status_writes += 1


def _key(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def _controls(raw: Mapping[str, Any], uid: object) -> bool:
    return any(
        ref.get("controller") is True and ref.get("uid") == uid
        for ref in (raw.get("metadata") or {}).get("ownerReferences") or ()
    )


def _pinned_node(allocation: Mapping[str, Any]) -> str:
    """The node a driver's allocation is pinned to (its first ``In`` requirement on the name or
    the hostname), or ""."""
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or ():
        for requirement in (term.get("matchFields") or []) + (term.get("matchExpressions") or []):
            if requirement.get("operator") == "In" and requirement.get("key") in (
                "metadata.name",
                "kubernetes.io/hostname",
            ):
                values = requirement.get("values") or []
                if values:
                    return str(values[0])
    return ""
