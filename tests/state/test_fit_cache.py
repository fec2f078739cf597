"""Remembered verdicts (extender/state/cache/fit_cache.py) must never change an answer.

The main test drives a generated cluster (plain GPU nodes, partitionable nodes with shared
counters, rack-wide network-attached pools, NICs; template, direct and shared claims) through
random schedules and changes — binds, deallocations, node label changes, slice changes, a
DeviceClass change, in-flight ledger entries — and after every step compares what filter and
prioritize answer (with the cache warm from earlier steps) with what the allocator computes from
scratch. Smaller tests pin the cache's own rules: LRU of shapes, invalidation by pool and node,
and the AllocationIndex that keeps the allocated state up to date claim by claim.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from bench import cluster_gen as gen
from extender.backends.embedded import EmbeddedBackend
from extender.core.allocator import Allocation, Allocator
from extender.core.answers import NOT_AVAILABLE, Unfit, Unresolvable
from extender.core.errors import ExtenderError
from extender.core.model import AllocatedState, AllocationResult, DeviceID, DeviceResult, Features
from extender.core.pools import SliceSnapshot
from extender.core.quantity import Quantity
from extender.core.scoring import ScoringCandidate, ScoringPolicy, node_device_usage, score_candidates
from extender.state.cache.claims import resolve_pod_claims
from extender.state.cache.fit_cache import FitCache
from extender.state.cache.store import AllocationIndex
from extender.state.service import SchedulingService
from tests import builders as b

SPEC = gen.ClusterSpec(
    nodes=8, devices=3, nics=2, partitionable=0.3, network_pools=2, pods=70, unschedulable=0.05, seed=11
)


# --- the oracle: the allocator from scratch, no remembered verdicts -------------------------------


def fresh_allocator(svc: SchedulingService, claims: Any) -> Allocator:
    """An allocator over the store's claims plus the ledger's entries, built the plain way (not
    from the store's incrementally kept in-use state, which is under test too), that runs the
    full search on every node (not the shortcuts the service's answers may come from)."""
    svc.cluster.refresh()
    return Allocator(
        claims.to_allocate,
        classes=svc.store.classes,
        snapshot=svc.store.snapshot(),
        allocated=svc.ledger.overlay(svc.store.allocated_state()),
        features=svc.features,
        selectors=svc.store.selectors,
        preallocated=claims.allocated,
        shortcuts=False,
    )


def fresh_filter(svc: SchedulingService, pod: dict[str, Any], names: list[str]) -> Any:
    """(passed, failed, unresolvable, error, per-node picks) computed without the FitCache."""
    try:
        claims = resolve_pod_claims(svc.cluster.pod(pod), svc.store, svc.ledger)
        if not claims.all:
            return list(names), {}, {}, "", {}
        allocator = fresh_allocator(svc, claims)
        passed: list[str] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        picks: dict[str, Any] = {}
        for name in names:
            answer = allocator.answer(svc.store.node(name))  # one node at a time, the full search
            if isinstance(answer, Allocation):
                passed.append(name)
                picks[name] = (answer.consumed_devices, answer.chosen_subrequests, answer.picked_ids)
            else:
                (unresolvable if isinstance(answer, Unresolvable) else failed)[name] = answer.reason
        return passed, failed, unresolvable, "", picks
    except ExtenderError as exc:
        return [], {}, {}, exc.reason, {}


def fresh_scores(svc: SchedulingService, pod: dict[str, Any], names: list[str]) -> list[tuple[str, int]]:
    claims = resolve_pod_claims(svc.cluster.pod(pod), svc.store, svc.ledger)
    if not claims.all:
        return [(n, 0) for n in names]
    allocator = fresh_allocator(svc, claims)
    candidates = []
    for name in names:
        node = svc.store.node(name)
        answer = allocator.answer(node)
        if isinstance(answer, Allocation):
            usage = node_device_usage(allocator.snapshot, node, allocator.allocated, svc.features)
            candidates.append(ScoringCandidate(answer, usage))
    scores = score_candidates(candidates, svc.prioritizer.policy_for(pod))
    return [(n, scores.get(n, 0)) for n in names]


def cached_filter(svc: SchedulingService, pod: dict[str, Any], names: list[str]) -> Any:
    outcome = svc.filter(pod, names)
    picks: dict[str, Any] = {}
    if not outcome.error:
        claims = resolve_pod_claims(svc.cluster.pod(pod), svc.store, svc.ledger)
        if claims.all:
            verdicts = svc.verdicts.verdicts(claims, svc.verdicts.candidates(names))
            for name in outcome.node_names:
                verdict = verdicts.by_node[name]
                assert isinstance(verdict, Allocation)
                picks[name] = (verdict.consumed_devices, verdict.chosen_subrequests, verdict.picked_ids)
    return outcome.node_names, outcome.failed, outcome.unresolvable, outcome.error, picks


def check(svc: SchedulingService, pods: list[dict[str, Any]], names: list[str], step: str) -> None:
    for pod in pods:
        label = f"{step}: pod {pod['metadata']['name']}"
        cached = cached_filter(svc, pod, names)
        assert cached == fresh_filter(svc, pod, names), label
        if cached[0] and not cached[3]:
            assert svc.prioritize(pod, cached[0]) == fresh_scores(svc, pod, cached[0]), label


# --- changes the test makes ---------------------------------------------------------------------


def deallocate_one(svc: SchedulingService, rng: random.Random) -> str:
    allocated = sorted(key for key, c in svc.store.claims.items() if c.allocation is not None)
    if not allocated:
        return "nothing to deallocate"
    key = rng.choice(allocated)
    raw = copy.deepcopy(svc.store.raw_claims[key])
    for field in ("allocation", "reservedFor", "devices"):
        raw.get("status", {}).pop(field, None)
    svc.backend.apply(raw)  # type: ignore[attr-defined]
    return f"deallocated {key}"


def stored_copy(svc: SchedulingService, kind: str, name: str) -> dict[str, Any]:
    """A copy of a cluster-scoped object as the embedded backend holds it, to edit and apply."""
    backend: EmbeddedBackend = svc.backend  # type: ignore[assignment]
    raw = backend.get(kind, None, name)
    assert raw is not None
    return copy.deepcopy(raw)


def relabel_node(svc: SchedulingService, rng: random.Random) -> str:
    """Move a node to another rack: the network-attached pools it sees change."""
    name = rng.choice(sorted(svc.store.nodes))
    raw = stored_copy(svc, "Node", name)
    labels = raw["metadata"].setdefault("labels", {})
    racks = sorted({n.labels.get(gen.RACK_LABEL, "") for n in svc.store.nodes.values()} - {""})
    labels[gen.RACK_LABEL] = rng.choice(racks) if racks else "rack-x"
    svc.backend.apply(raw)  # type: ignore[attr-defined]
    return f"relabelled {name}"


def change_slice(svc: SchedulingService, rng: random.Random) -> str:
    """Drop the last device of a slice, or taint its first one (so it needs the full search)."""
    name = rng.choice(sorted(k for k, s in svc.store.slices.items() if s.devices))
    raw = stored_copy(svc, "ResourceSlice", name)
    devices = raw["spec"]["devices"]
    if rng.random() < 0.5 and len(devices) > 1:
        devices.pop()
        what = "dropped a device of"
    else:
        devices[0]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
        what = "tainted a device of"
    svc.backend.apply(raw)  # type: ignore[attr-defined]
    return f"{what} {name}"


def change_class(svc: SchedulingService, rng: random.Random) -> str:
    name = rng.choice(sorted(svc.store.classes))
    raw = stored_copy(svc, "DeviceClass", name)
    selectors = raw["spec"].setdefault("selectors", [])
    selectors.append({"cel": {"expression": 'device.attributes["gpu.example.com"].index != 0'}})
    svc.backend.apply(raw)  # type: ignore[attr-defined]
    return f"narrowed class {name}"


def hold_in_flight(svc: SchedulingService, pods: list[dict[str, Any]], names: list[str]) -> str:
    """A bind in progress: its devices are in the ledger, not yet in the store."""
    for pod in pods:
        try:
            claims = resolve_pod_claims(svc.cluster.pod(pod), svc.store, svc.ledger)
        except ExtenderError:
            continue
        if not claims.to_allocate:
            continue
        allocator = svc.cluster.allocator(claims)
        for name in names:
            allocation = allocator.allocate(svc.store.node(name))
            if allocation is not None:
                for claim, result in zip(claims.to_allocate, allocation.results, strict=True):
                    svc.ledger.add(
                        claim=claim, pod_key=claims.pod_key, pod_uid=claims.pod_uid, node=name, result=result
                    )
                return f"{pod['metadata']['name']} in flight on {name}"
    return "nothing to hold"


async def schedule_one(svc: SchedulingService, pod: dict[str, Any], names: list[str]) -> str:
    outcome = svc.filter(pod, names)
    if outcome.error or not outcome.node_names:
        return f"{pod['metadata']['name']} not schedulable now"
    scores = svc.prioritize(pod, outcome.node_names)
    best = max(scores, key=lambda s: s[1])[0]
    meta = pod["metadata"]
    try:
        await svc.bind(meta["namespace"], meta["name"], meta["uid"], best)
    except ExtenderError as exc:
        return f"bind failed: {exc.reason}"
    return f"bound {meta['name']} to {best}"


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_remembered_verdicts_equal_fresh_ones_through_random_changes(seed: int) -> None:
    objects = gen.generate(SPEC)
    policy = ScoringPolicy.parse("binpack=2,prioritized=1,spread=1,topology:resource.kubernetes.io/pcieRoot=1")
    # Holds (hold_seconds) change the ledger at every filter and prioritize and make one best score
    # unique: state changes and an answer rule of their own (tests/state/test_holds.py). This test
    # is about remembered verdicts, against an oracle that knows neither.
    svc = SchedulingService(backend=EmbeddedBackend(objects), scoring=policy, hold_seconds=0)
    rng = random.Random(seed)
    names = sorted(svc.store.nodes)
    pending = gen.pods_of(objects)
    rng.shuffle(pending)
    probes = pending[:6]
    queue = pending[6:]
    check(svc, probes, names, "start")
    check(svc, probes, names, "start, warm")
    assert svc.store.fits.stats.hits > 0
    in_flight: list[str] = []
    for step in range(40):
        roll = rng.random()
        if roll < 0.55 and queue:
            what = await schedule_one(svc, queue.pop(), names)
        elif roll < 0.65:
            what = deallocate_one(svc, rng)
        elif roll < 0.73:
            what = relabel_node(svc, rng)
        elif roll < 0.81:
            what = change_slice(svc, rng)
        elif roll < 0.84:
            what = change_class(svc, rng)
        elif roll < 0.92 or not in_flight:
            what = hold_in_flight(svc, queue[-3:], names)
            in_flight = [entry.claim_key for entry in svc.ledger]
        else:
            for key in in_flight:
                svc.ledger.drop(key)
            in_flight = []
            what = "in-flight entries dropped"
        check(svc, probes + queue[-2:], names, f"step {step} ({what})")
        expected = svc.ledger.overlay(svc.store.allocated_state())
        in_use = svc.store.in_use_state()
        assert (in_use.devices, in_use.shared_ids) == (expected.devices, expected.shared_ids), step
        assert in_use.consumed_capacity == expected.consumed_capacity, step
    assert svc.store.fits.stats.dropped > 0


async def test_a_bind_recomputes_only_the_node_it_changed() -> None:
    objects = gen.generate(gen.ClusterSpec(nodes=6, devices=4, nics=0, pods=12, unschedulable=0.0, seed=3))
    svc = SchedulingService(backend=EmbeddedBackend(objects), hold_seconds=0)  # holds: tests/state/test_holds.py
    names = sorted(svc.store.nodes)
    one_gpu = [
        p
        for p in gen.pods_of(objects)
        if p["metadata"]["labels"][gen.SHAPE_LABEL] == "one-gpu"
        and p["metadata"]["labels"][gen.MIX_LABEL] == "template"
    ]
    first, second = one_gpu[0], one_gpu[1]
    svc.filter(second, names)
    stats = svc.store.fits.stats
    misses = stats.misses
    svc.filter(second, names)
    assert stats.misses == misses  # everything remembered
    meta = first["metadata"]
    outcome = svc.filter(first, names)  # the same template: the same shape, all hits
    assert stats.misses == misses
    await svc.bind(meta["namespace"], meta["name"], meta["uid"], outcome.node_names[0])
    svc.filter(second, names)
    assert stats.misses == misses + 1  # only the node the bind used


# --- the cache's own rules ------------------------------------------------------------------------


def _view_with_pool(driver: str, pool: str) -> Any:
    snapshot = SliceSnapshot([b.node_slice("node-1", ["device-1"], driver=driver, pool=pool)])
    return snapshot.node_view(b.node("node-1"), Features())


def test_shapes_are_forgotten_least_recently_used_first() -> None:
    fits = FitCache(max_shapes=2)
    fits.table("a").put("node-1", Unfit("x"))
    fits.table("b").put("node-1", Unfit("x"))
    fits.table("a")  # used again: "b" is now the oldest
    fits.table("c")
    assert "node-1" in fits.table("a").by_node
    assert fits.table("b").by_node == {}
    with pytest.raises(ValueError):
        FitCache(max_shapes=0)


def test_pool_invalidation_drops_exactly_the_dependent_nodes() -> None:
    fits = FitCache()
    table = fits.table("shape")
    view_a = _view_with_pool("driver-a", "pool-a")
    view_b = _view_with_pool("driver-a", "pool-b")
    for node, view in (("node-a", view_a), ("node-b", view_b)):
        fits.depends(node, view)
        table.put(node, Unfit("cannot allocate all claims"))
    fits.drop_devices([DeviceID("driver-a", "pool-a", "device-1")])
    assert set(table.by_node) == set(table.failing) == {"node-b"}
    fits.drop_devices([DeviceID("driver-a", "pool-a", "device-1")])  # nobody depends on it any more
    assert set(table.by_node) == {"node-b"}
    fits.depends("node-a", view_a)  # registers again after it was dropped
    table.put("node-a", Unfit("x"))
    fits.drop_pools([("driver-a", "pool-a")])
    assert set(table.by_node) == {"node-b"}
    fits.drop_nodes(["node-b"])
    assert table.by_node == {} and table.failing == {} and len(fits) == 0


def _result(device: str, share: str | None = None, memory: str | None = None, admin: bool = False) -> DeviceResult:
    return DeviceResult(
        request="r",
        driver="d",
        pool="p",
        device=device,
        share_id=share,
        admin_access=admin,
        consumed_capacity={"memory": Quantity.parse(memory)} if memory else None,
    )


def test_allocation_index_matches_a_rebuild_after_every_change() -> None:
    rng = random.Random(5)
    index = AllocationIndex()
    current: dict[str, AllocationResult] = {}
    for _ in range(400):
        key = f"claim-{rng.randrange(8)}"
        if rng.random() < 0.3:
            allocation = None
        else:
            devices = tuple(
                _result(
                    f"dev-{rng.randrange(5)}",
                    share=rng.choice([None, None, f"s{rng.randrange(3)}"]),
                    memory=rng.choice([None, "1Gi", "512Mi"]),
                    admin=rng.random() < 0.1,
                )
                for _ in range(rng.randrange(1, 3))
            )
            allocation = AllocationResult(devices=devices)
        before = _signatures(index.state)
        reported = index.set(key, allocation)
        if allocation is None:
            current.pop(key, None)
        else:
            current[key] = allocation
        rebuilt = AllocatedState()
        for result in current.values():
            rebuilt.add_allocation(result)
        assert index.state.devices == rebuilt.devices
        assert index.state.shared_ids == rebuilt.shared_ids
        assert index.state.consumed_capacity == rebuilt.consumed_capacity
        after = _signatures(index.state)
        changed = {d for d in before.keys() | after.keys() if before.get(d) != after.get(d)}
        assert changed <= reported  # every change is reported: remembered verdicts depend on it


def _signatures(state: AllocatedState) -> dict[DeviceID, tuple[object, ...]]:
    """Per device: everything the state says about it."""
    out: dict[DeviceID, tuple[object, ...]] = {}
    devices = state.devices | {s.device for s in state.shared_ids} | set(state.consumed_capacity)
    for device in devices:
        shares = frozenset(s.share_id for s in state.shared_ids if s.device == device)
        out[device] = (device in state.devices, shares, state.consumed_capacity.get(device))
    return out


def test_a_second_holder_of_a_device_in_exclusive_use_changes_nothing() -> None:
    """A bind's in-flight entry and the claim's own allocation hold the same devices while the store
    catches up: the overlap must not invalidate remembered verdicts, twice per bind."""
    index = AllocationIndex()
    held = AllocationResult(devices=(_result("dev-1"), _result("dev-2")))
    device_1, device_2 = (r.device_id for r in held.devices)
    assert index.set("in-flight:claim", held) == {device_1, device_2}
    assert index.set("claim", held) == set()
    assert index.set("in-flight:claim", None) == set()
    assert index.state.devices == {device_1, device_2}
    assert index.set("claim", AllocationResult(devices=(_result("dev-1"),))) == {device_2}
    assert index.set("claim", None) == {device_1}
    assert index.state.devices == set()


def test_shape_verdicts_keep_the_filter_maps_and_coverage_current() -> None:
    table = FitCache().table("shape")
    table.put("a", Unfit("cannot allocate all claims"))
    table.put("b", Unresolvable("no device of the class"))
    assert table.failed == {"a": "cannot allocate all claims"} and table.unresolvable == {"b": "no device of the class"}
    table.put("a", Unresolvable("not available"))  # a verdict replaced in place
    assert table.failed == {} and table.unresolvable == {"a": "not available", "b": "no device of the class"}
    everyone = {"a", "b", "c"}
    assert table.unknown(7, everyone) == {"c"}  # not covered yet: looked up node by node
    table.put("c", Unfit("x"))
    table.mark_covered(7)
    assert table.unknown(7, everyone) == set()
    assert not table.drop("missing") and table.unknown(7, everyone) == set()
    assert table.drop("b") and table.drop("c")
    assert table.unknown(7, everyone) == {"b", "c"}  # from the drops since it was covered
    assert table.unknown(7, {"a", "b"}) == {"b"}
    assert table.unknown(8, {"a", "b"}) == {"b"}  # another list, never covered
    assert table.unresolvable == {"a": "not available"} and table.failing.keys() == {"a"}
    table.put("b", Unfit("y"))
    assert table.unknown(7, everyone) == {"c"}  # b is known again
    mark = table.drops
    table.raw_scores(None)["b"] = 0
    table.put("b", Unresolvable("z"))  # replaced in place: logged as dropped, its raw scores gone
    assert table.dropped_since(mark) == ["b"] and table.raw_scores(None) == {}
    assert table.unresolvable["b"] == "z" and "b" not in table.failed
    table.drop("a")
    assert table.failing == {"b": Unresolvable("z")} and table.failed == {} and table.unresolvable == {"b": "z"}


def test_a_long_drop_log_starts_over() -> None:
    table = FitCache().table("shape")
    names = {f"n{i}" for i in range(3)}
    for name in names:
        table.put(name, Unfit("x"))
    table.mark_covered(1)
    for _ in range(3000):  # more drops than the log keeps
        for name in sorted(names):
            table.drop(name)
            table.put(name, Unfit("x"))
    table.drop("n1")
    assert table.unknown(1, names) == {"n1"}
    table.put("n1", Unfit("x"))
    table.mark_covered(1)
    table.drop("n2")
    assert table.unknown(1, names) == {"n2"}


def test_put_all_equals_one_put_per_node() -> None:
    def state(table: Any) -> tuple[Any, ...]:
        return (table.by_node, table.failing, table.failed, table.unresolvable, table.drops)

    for verdicts in (
        dict.fromkeys(["b", "c"], Unresolvable(NOT_AVAILABLE, "default/c1")),  # one claim rules them out
        {"b": Unresolvable(NOT_AVAILABLE, "default/c1"), "c": Unresolvable(NOT_AVAILABLE, "default/c2")},
    ):
        bulk, single = FitCache().table("s"), FitCache().table("s")
        for table in (bulk, single):
            table.put("a", Unfit("x"))
        before = bulk.failing_version
        bulk.put_all(verdicts)  # new nodes: the bulk way
        for node, verdict in verdicts.items():
            single.put(node, verdict)
        assert state(bulk) == state(single) and bulk.failing_version > before
        again = {"a": verdicts["b"], "d": verdicts["c"]}
        bulk.put_all(again)  # "a" has a verdict: one put each
        for node, verdict in again.items():
            single.put(node, verdict)
        assert state(bulk) == state(single)
