"""Property tests of the allocator on small random clusters (hypothesis).

Generated inputs: node-1 (and sometimes node-2) with at most six devices visible to node-1, spread
over node-local slices of two drivers, a multi-host pool split over several slices and an
``allNodes`` slice; slices handed over in random order; some devices already allocated; one to
three claims with one to three requests each: ExactCount 1-3, sometimes All, sometimes
firstAvailable, sometimes adminAccess; class and request selectors drawn from a small attribute
space; matchAttribute constraints (including type mismatches int / string / bool).

Checked properties:
- every result is valid, judged independently of the allocator: class and request selectors hold
  (a Python predicate mirroring each generated CEL selector), counts are right, constraints hold,
  no device is handed out twice (admin-access results excepted, with upstream's ordering rule),
  no already-allocated device is used by a non-admin request;
- "does not fit" (None) is only reported when an exhaustive brute-force search agrees that no
  assignment exists, and the allocator returns the first solution in upstream's search order
  (claims, requests, subrequests by priority, devices by pool/slice/device order) — or fails
  fatally exactly where that search meets an All-mode device that breaks a constraint;
- the allocator does not mutate its inputs, and is deterministic (same input, or the same slices
  in another order, give the same answer, with a cold or a warm selector cache).

Not generated here (covered by the case table, tests/core/cases/): taints, shared counters,
consumable capacity and shareable devices, binding conditions, per-device node selection, CEL
errors, invalid or incomplete pools, the 32-device limit.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.core import errors
from extender.core.allocator import Allocation, Allocator
from extender.core.cel import SelectorCache
from extender.core.model import (
    ALLOCATION_MODE_ALL,
    ALLOCATION_MODE_EXACT_COUNT,
    AllocatedState,
    AttributeValue,
    DeviceClass,
    DeviceConstraint,
    DeviceID,
    DeviceRequest,
    ExactRequest,
    NodeInfo,
    ResourceClaim,
    ResourceSlice,
)
from extender.core.pools import SliceSnapshot
from extender.core.quantity import Quantity
from tests import builders as b

DRIVER_A = b.DRIVER
DRIVER_B = "driver-b"
NODE_1 = b.NODE
NODE_2 = "node-2"
CONSTRAINT_TEXT = "because a claim constraint would not be satisfied"

# 120 examples per property keeps the module well under a minute on 2 cores; set
# DRA_PROPERTY_EXAMPLES=2000 for a deeper run.
PROPERTY_SETTINGS = settings(
    max_examples=int(os.environ.get("DRA_PROPERTY_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- selectors: a tiny AST, rendered as CEL for the allocator and evaluated in Python here ----------

Selector = tuple[Any, ...]


def _attribute_guard(kind: str, ident: str) -> str:
    return f'"{ident}" in device.{kind}["{DRIVER_A}"]'


def selector_cel(sel: Selector) -> str:
    op = sel[0]
    if op == "driver":
        return f'device.driver == "{sel[1]}"'
    if op == "model":
        model = f'device.attributes["{DRIVER_A}"].model'
        return f'{_attribute_guard("attributes", "model")} && {model} == "{sel[1]}"'
    if op == "numa_lt":
        numa = f'device.attributes["{DRIVER_A}"].numa'
        return f"{_attribute_guard('attributes', 'numa')} && {numa} < {sel[1]}"
    if op == "mem_ge":
        return (
            f"{_attribute_guard('capacity', 'memory')} && "
            f'device.capacity["{DRIVER_A}"].memory.compareTo(quantity("{sel[1]}")) >= 0'
        )
    if op == "not":
        return f"!({selector_cel(sel[1])})"
    if op == "and":
        return f"({selector_cel(sel[1])}) && ({selector_cel(sel[2])})"
    if op == "or":
        return f"({selector_cel(sel[1])}) || ({selector_cel(sel[2])})"
    raise AssertionError(f"unknown selector {sel!r}")


#: Every rendered selector, back to its AST: the test judges results with ``selector_holds``.
AST_OF: dict[str, Selector] = {}


def render(sel: Selector) -> str:
    text = selector_cel(sel)
    AST_OF[text] = sel
    return text


def lookup(mapping: Mapping[str, Any], driver: str, qualified: str) -> Any:
    """Upstream's attribute lookup for a fully qualified name: the exact key, else the bare id
    when the domain is the device's driver (docs/semantics.md §8; CEL's domain maps behave the same)."""
    if qualified in mapping:
        return mapping[qualified]
    domain, _, ident = qualified.partition("/")
    if domain == driver and ident in mapping:
        return mapping[ident]
    return None


class NodeDevice(NamedTuple):
    id: DeviceID
    driver: str
    attributes: Mapping[str, AttributeValue]
    capacity: Mapping[str, Quantity]


def selector_holds(sel: Selector, dev: NodeDevice) -> bool:
    op = sel[0]
    if op == "driver":
        return bool(dev.driver == sel[1])
    if op == "model":
        return bool(lookup(dev.attributes, dev.driver, f"{DRIVER_A}/model") == sel[1])
    if op == "numa_lt":
        value = lookup(dev.attributes, dev.driver, f"{DRIVER_A}/numa")
        return value is not None and value < sel[1]
    if op == "mem_ge":
        memory = lookup(dev.capacity, dev.driver, f"{DRIVER_A}/memory")
        return memory is not None and memory.compare(Quantity.parse(sel[1])) >= 0
    if op == "not":
        return not selector_holds(sel[1], dev)
    if op == "and":
        return selector_holds(sel[1], dev) and selector_holds(sel[2], dev)
    if op == "or":
        return selector_holds(sel[1], dev) or selector_holds(sel[2], dev)
    raise AssertionError(f"unknown selector {sel!r}")


_leaf_selectors = st.one_of(
    st.sampled_from([DRIVER_A, DRIVER_B]).map(lambda d: ("driver", d)),
    st.sampled_from(["a", "b"]).map(lambda v: ("model", v)),
    st.sampled_from([1, 2]).map(lambda k: ("numa_lt", k)),
    st.sampled_from(["8Gi", "16Gi"]).map(lambda q: ("mem_ge", q)),
)
selectors = st.recursive(
    _leaf_selectors,
    lambda inner: st.one_of(
        inner.map(lambda s: ("not", s)),
        st.tuples(st.just("and"), inner, inner),
        st.tuples(st.just("or"), inner, inner),
    ),
    max_leaves=3,
)

# --- scenarios ----------------------------------------------------------------------------------------


@dataclass
class Scenario:
    slices: list[ResourceSlice]
    classes: dict[str, DeviceClass]
    claims: list[ResourceClaim]
    allocated: AllocatedState
    node: NodeInfo

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        lines = ["Scenario("]
        for s in self.slices:
            where = s.node_name or "allNodes"
            lines.append(f"  slice {s.name} {s.driver}/{s.pool.name} x{s.pool.resource_slice_count} @{where}:")
            for d in s.devices:
                caps = {k: str(c.value) for k, c in d.capacity.items()}
                lines.append(f"    {d.name} {dict(d.attributes)} {caps}")
        for c in self.classes.values():
            lines.append(f"  class {c.name}: {list(c.selectors)}")
        lines.append(f"  allocated: {sorted(str(i) for i in self.allocated.devices)}")
        for claim in self.claims:
            lines.append(f"  claim {claim.name}: constraints {list(claim.constraints)}")
            for r in claim.requests:
                lines.append(f"    {r}")
        lines.append(")")
        return "\n".join(lines)


# (slice name, driver, pool, node name or None for allNodes). The two pool-1 slices of node-1 are
# named so that name order differs from this list's order.
_PLACEMENTS = (
    ("node-1-slice-b", DRIVER_A, "pool-1", NODE_1),
    ("node-1-slice-a", DRIVER_A, "pool-1", NODE_1),
    ("node-1-pool-2", DRIVER_A, "pool-2", NODE_1),
    ("node-1-driver-b", DRIVER_B, "pool-1", NODE_1),
    ("everywhere", DRIVER_A, "pool-0", None),
)
_NODE_2_PLACEMENT = ("node-2-slice", DRIVER_A, "pool-1", NODE_2)


@st.composite
def device_bodies(draw: st.DrawFn, name: str) -> Any:
    qualified = draw(st.booleans())  # write names as "driver-a/<id>" instead of bare ids
    attributes: dict[str, AttributeValue] = {}
    for ident, values in (
        ("model", [None, "a", "b"]),
        ("numa", [None, 0, 1]),
        ("tag", [None, 1, "1", True]),  # same text, different types: never match each other
    ):
        value = draw(st.sampled_from(values))
        if value is not None:
            attributes[f"{DRIVER_A}/{ident}" if qualified else ident] = value
    memory = draw(st.sampled_from([None, "8Gi", "16Gi", "32Gi"]))
    return b.device(name, attributes=attributes, capacity={} if memory is None else {"memory": memory})


@st.composite
def exact_requests(draw: st.DrawFn, name: str, class_names: Sequence[str], *, sub: bool) -> ExactRequest:
    mode = draw(st.sampled_from([ALLOCATION_MODE_EXACT_COUNT] * 5 + [ALLOCATION_MODE_ALL]))
    admin = None if sub else draw(st.sampled_from([None, None, None, False, True]))
    sels = [draw(selectors)] if draw(st.integers(0, 3)) == 0 else []
    return b.subrequest(
        name,
        draw(st.sampled_from(class_names)),
        draw(st.sampled_from([1, 1, 1, 1, 2, 3])) if mode == ALLOCATION_MODE_EXACT_COUNT else 0,
        selectors=[render(s) for s in sels],
        mode=mode,
        admin_access=admin,
    )


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    counter = itertools.count(1)
    placed: dict[tuple[str, str, str, str | None], list[Any]] = {p: [] for p in _PLACEMENTS}
    for _ in range(draw(st.integers(3, 6))):
        where = draw(st.sampled_from(_PLACEMENTS))
        placed[where].append(draw(device_bodies(f"device-{next(counter)}")))
    placed[_NODE_2_PLACEMENT] = [draw(device_bodies(f"device-{next(counter)}")) for _ in range(draw(st.integers(0, 2)))]
    used = {p: devs for p, devs in placed.items() if devs}
    per_pool: dict[tuple[str, str], int] = {}
    for _, driver, pool, _node in used:
        per_pool[(driver, pool)] = per_pool.get((driver, pool), 0) + 1
    slices = [
        b.node_slice(
            where,
            devs,
            driver=driver,
            pool=pool,
            name=slice_name,
            slice_count=per_pool[(driver, pool)],
            all_nodes=where is None,
        )
        for (slice_name, driver, pool, where), devs in used.items()
    ]
    slices = list(draw(st.permutations(slices)))

    node_ids = [NodeDevice(e.id, e.driver, e.attributes, e.capacity) for e in node_devices(slices, NODE_1)]
    allocated = AllocatedState()
    for dev in node_ids:
        if draw(st.integers(0, 5)) == 0:
            allocated.devices.add(dev.id)

    classes = {
        "class-a": b.device_class("class-a", render(("driver", DRIVER_A))),
        "class-any": b.device_class("class-any"),
        "class-r": b.device_class("class-r", render(draw(selectors))),
    }
    # Weighted: most requests should have candidates, or nearly every scenario is a plain no-fit.
    class_names = ["class-a", "class-a", "class-any", "class-any", "class-any", "class-r"]

    claims = []
    for c in range(draw(st.sampled_from([1, 1, 2, 2, 3]))):
        requests: list[DeviceRequest] = []
        for r in range(draw(st.sampled_from([1, 1, 2, 2, 3]))):
            name = f"req-{r}"
            if draw(st.integers(0, 3)) == 0:
                subs = [draw(exact_requests(f"sub-{s}", class_names, sub=True)) for s in range(draw(st.integers(1, 2)))]
                requests.append(b.first_available(name, *subs))
            else:
                requests.append(DeviceRequest(name=name, exactly=draw(exact_requests(name, class_names, sub=False))))
        names = [r.name for r in requests] + [f"{r.name}/{s.name}" for r in requests for s in r.first_available]
        constraints = [
            b.match_attribute(
                draw(st.sampled_from([f"{DRIVER_A}/model", f"{DRIVER_A}/numa", f"{DRIVER_A}/tag"])),
                *draw(st.one_of(st.just([]), st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))),
            )
            for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2])))
        ]
        claims.append(b.claim(f"claim-{c}", *requests, constraints=constraints))
    return Scenario(slices, classes, claims, allocated, b.node(NODE_1))


def _alternatives(request: DeviceRequest) -> tuple[ExactRequest, ...]:
    return (request.exactly,) if request.exactly is not None else request.first_available


# --- the node's devices in upstream's 1.36 order, computed independently of pools.py -----------------


class _Entry(NamedTuple):
    id: DeviceID
    driver: str
    attributes: Mapping[str, AttributeValue]
    capacity: Mapping[str, Quantity]


def node_devices(slices: Sequence[ResourceSlice], node_name: str) -> list[_Entry]:
    """Devices visible to the node: pools by (driver, pool), slices by name, devices as listed.
    (Generated pools are always complete and of one generation.)"""
    visible = [s for s in slices if s.node_name == node_name or s.all_nodes]
    visible.sort(key=lambda s: (s.driver, s.pool.name, s.name))
    return [
        _Entry(
            DeviceID(s.driver, s.pool.name, d.name),
            s.driver,
            d.attributes,
            {k: c.value for k, c in d.capacity.items()},
        )
        for s in visible
        for d in s.devices
    ]


def selectable(scn: Scenario, exact: ExactRequest, dev: NodeDevice) -> bool:
    texts = [*scn.classes[exact.device_class_name].selectors, *exact.selectors]
    return all(selector_holds(AST_OF[t], dev) for t in texts if t is not None)


# --- brute force ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One way to satisfy one request: a subrequest (or the request itself) and its devices."""

    result_name: str  # "req" or "req/sub"
    admin: bool
    all_mode: bool
    devices: tuple[NodeDevice, ...]


@dataclass(frozen=True)
class Slot:
    claim_index: int
    base: str
    constraints: tuple[DeviceConstraint, ...]
    first_of_claim: bool
    options: tuple[Option, ...]  # in upstream's search order


def build_slots(scn: Scenario) -> list[Slot]:
    devices = [NodeDevice(*e) for e in node_devices(scn.slices, scn.node.name)]
    slots = []
    for ci, claim in enumerate(scn.claims):
        for ri, req in enumerate(claim.requests):
            options: list[Option] = []
            for exact in _alternatives(req):
                name = req.name if req.exactly is not None else f"{req.name}/{exact.name}"
                candidates = [d for d in devices if selectable(scn, exact, d)]
                admin = bool(exact.admin_access)
                if exact.allocation_mode == ALLOCATION_MODE_ALL:
                    if candidates:  # All with no matching device is a plain failure
                        options.append(Option(name, admin, True, tuple(candidates)))
                else:
                    options.extend(
                        Option(name, admin, False, combo) for combo in itertools.combinations(candidates, exact.count)
                    )
            slots.append(Slot(ci, req.name, claim.constraints, ri == 0, tuple(options)))
    return slots


def applies(constraint: DeviceConstraint, base: str, result_name: str) -> bool:
    return not constraint.requests or base in constraint.requests or result_name in constraint.requests


def attribute_key(value: Any) -> tuple[str, str] | None:
    """Values match only with the same type: 1, "1" and True are three different values."""
    return None if value is None else (type(value).__name__, str(value))


Picks = tuple[tuple[int, str, DeviceID, bool], ...]  # (claim index, result name, device, admin)


@dataclass(frozen=True)
class Outcome:
    kind: str  # "found" | "none" | "fatal"
    picks: Picks = ()


def brute_force(scn: Scenario, *, fatal_all_mode: bool) -> Outcome:
    """Enumerate every assignment (request by request: subrequest, then a combination of its
    devices), in upstream's search order, and return the first valid one.

    With ``fatal_all_mode`` an All-mode device that breaks a constraint ends the search with
    "fatal", as upstream's allocator does; without it such an option is merely invalid, which
    makes "none" mean "no valid assignment exists at all".
    """
    slots = build_slots(scn)
    allocated = scn.allocated.devices
    dead: set[Any] = set()  # states known to have no completion (memo)

    def try_option(
        slot: Slot, opt: Option, used: frozenset[DeviceID], mine: frozenset[DeviceID], refs: tuple[Any, ...]
    ) -> tuple[str, frozenset[DeviceID], frozenset[DeviceID], tuple[Any, ...]]:
        new_refs = list(refs)
        for dev in opt.devices:
            # Admin requests only may not repeat a device within their claim; others may not take
            # one allocated elsewhere or picked earlier by any claim of this attempt (admin or not).
            taken = dev.id in mine if opt.admin else (dev.id in allocated or dev.id in used)
            if taken:
                return "reject", used, mine, refs
            for i, constraint in enumerate(slot.constraints):
                if not applies(constraint, slot.base, opt.result_name):
                    continue
                assert constraint.match_attribute is not None
                key = attribute_key(lookup(dev.attributes, dev.driver, constraint.match_attribute))
                if key is None or (new_refs[i] is not None and new_refs[i] != key):
                    return ("fatal" if opt.all_mode and fatal_all_mode else "reject"), used, mine, refs
                new_refs[i] = key
            used = used | {dev.id}
            mine = mine | {dev.id}
        return "ok", used, mine, tuple(new_refs)

    def search(
        pos: int, used: frozenset[DeviceID], mine: frozenset[DeviceID], refs: tuple[Any, ...], picks: Picks
    ) -> Outcome:
        if pos == len(slots):
            return Outcome("found", picks)
        slot = slots[pos]
        if slot.first_of_claim:
            mine, refs = frozenset(), (None,) * len(slot.constraints)
        state = (pos, used, mine, refs)
        if state in dead:
            return Outcome("none")
        for opt in slot.options:
            verdict, used2, mine2, refs2 = try_option(slot, opt, used, mine, refs)
            if verdict == "fatal":
                return Outcome("fatal")
            if verdict == "ok":
                more = tuple((slot.claim_index, opt.result_name, d.id, opt.admin) for d in opt.devices)
                out = search(pos + 1, used2, mine2, refs2, picks + more)
                if out.kind != "none":
                    return out
        dead.add(state)
        return Outcome("none")

    return search(0, frozenset(), frozenset(), (), ())


# --- running the allocator ------------------------------------------------------------------------------


def run(
    scn: Scenario, *, slices: Sequence[ResourceSlice] | None = None, cache: SelectorCache | None = None
) -> Allocation | errors.PodUnschedulable | None:
    allocator = Allocator(
        scn.claims,
        classes=scn.classes,
        snapshot=SliceSnapshot(scn.slices if slices is None else slices),
        allocated=scn.allocated,
        selectors=SelectorCache() if cache is None else cache,
    )
    try:
        return allocator.allocate(scn.node)
    except errors.PodUnschedulable as exc:
        assert CONSTRAINT_TEXT in exc.reason, f"unexpected fatal error: {exc.reason}"
        return exc


def picks_of(allocation: Allocation) -> Picks:
    return tuple(
        (ci, r.request, r.device_id, r.admin_access)
        for ci, result in enumerate(allocation.results)
        for r in result.devices
    )


def summary(outcome: Allocation | errors.PodUnschedulable | None) -> Any:
    if outcome is None:
        return None
    if isinstance(outcome, errors.PodUnschedulable):
        return ("fatal", outcome.reason)
    return (outcome.node, picks_of(outcome), outcome.chosen_subrequests)


def has_constrained_all_request(scn: Scenario) -> bool:
    for claim in scn.claims:
        for req in claim.requests:
            for exact in _alternatives(req):
                name = req.name if req.exactly is not None else f"{req.name}/{exact.name}"
                if exact.allocation_mode == ALLOCATION_MODE_ALL and any(
                    applies(c, req.name, name) for c in claim.constraints
                ):
                    return True
    return False


# --- independent validation of one allocation -----------------------------------------------------------


def check_allocation(scn: Scenario, allocation: Allocation) -> None:
    devices = {e.id: NodeDevice(*e) for e in node_devices(scn.slices, scn.node.name)}
    assert allocation.node == scn.node.name
    assert len(allocation.results) == len(scn.claims)
    exclusive_owner: dict[DeviceID, int] = {}  # device -> claim index, non-admin results
    admin_users: dict[DeviceID, list[int]] = {}
    for ci, (claim, result) in enumerate(zip(scn.claims, allocation.results, strict=True)):
        ids = [r.device_id for r in result.devices]
        assert len(set(ids)) == len(ids), f"{claim.name}: a device twice within one claim: {ids}"
        assert [d.name for d in allocation.picked[ci]] == [i.device for i in ids]
        by_request: dict[str, list[Any]] = {}
        for r in result.devices:
            by_request.setdefault(r.request.split("/")[0], []).append(r)
        assert set(by_request) <= {req.name for req in claim.requests}
        for ri, req in enumerate(claim.requests):
            got = by_request.get(req.name, [])
            names = {r.request for r in got}
            assert len(names) == 1, f"{claim.name}/{req.name}: results {names}"
            (name,) = names
            if req.exactly is not None:
                exact = req.exactly
                assert name == req.name
                assert allocation.chosen_subrequests[ci][ri] is None
            else:
                chosen = allocation.chosen_subrequests[ci][ri]
                assert chosen is not None
                exact = req.first_available[chosen]
                assert name == f"{req.name}/{exact.name}"
            for r in got:
                dev = devices.get(r.device_id)
                assert dev is not None, f"{r.device_id} is not visible to {scn.node.name}"
                assert selectable(scn, exact, dev), f"{r.device_id} does not match {name}"
                assert r.admin_access == bool(exact.admin_access)
                if r.admin_access:
                    admin_users.setdefault(r.device_id, []).append(ci)
                else:
                    assert r.device_id not in scn.allocated.devices, f"{r.device_id} is allocated elsewhere"
                    assert r.device_id not in exclusive_owner, f"{r.device_id} handed out twice"
                    exclusive_owner[r.device_id] = ci
            if exact.allocation_mode == ALLOCATION_MODE_ALL:
                expected = [i for i, d in devices.items() if selectable(scn, exact, d)]
                assert sorted(map(str, expected)) == sorted(str(r.device_id) for r in got)
            else:
                assert len(got) == exact.count
        for constraint in claim.constraints:
            assert constraint.match_attribute is not None
            keys = {
                attribute_key(lookup(devices[r.device_id].attributes, r.driver, constraint.match_attribute))
                for r in result.devices
                if applies(constraint, r.request.split("/")[0], r.request)
            }
            assert None not in keys and len(keys) <= 1, f"{claim.name}: {constraint} broken: {keys}"
    # An admin pick marks the device in use for its claim: only earlier claims may hold it exclusively.
    for device_id, users in admin_users.items():
        owner = exclusive_owner.get(device_id)
        assert owner is None or owner < min(users), f"{device_id}: exclusive use after an admin pick"


# --- the properties ---------------------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(scenarios())
def test_results_valid_and_no_fit_confirmed_by_brute_force(scn: Scenario) -> None:
    outcome = run(scn)
    if isinstance(outcome, Allocation):
        check_allocation(scn, outcome)
    elif outcome is None:
        exhaustive = brute_force(scn, fatal_all_mode=False)
        assert exhaustive.kind == "none", f"allocator found no fit, brute force found {exhaustive.picks}"
    else:
        # Upstream fails the attempt when an All-mode device breaks a constraint.
        assert has_constrained_all_request(scn)


@PROPERTY_SETTINGS
@given(scenarios())
def test_first_solution_in_search_order(scn: Scenario) -> None:
    expected = brute_force(scn, fatal_all_mode=True)
    outcome = run(scn)
    if expected.kind == "found":
        assert isinstance(outcome, Allocation), f"expected {expected.picks}, got {summary(outcome)}"
        assert picks_of(outcome) == expected.picks
    elif expected.kind == "none":
        assert outcome is None, f"expected no fit, got {summary(outcome)}"
    else:
        assert isinstance(outcome, errors.PodUnschedulable), f"expected a fatal error, got {summary(outcome)}"


def fingerprint(obj: Any) -> Any:
    """A structural value of any model object, for before/after comparison."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return (
            type(obj).__name__,
            tuple((f.name, fingerprint(getattr(obj, f.name))) for f in dataclasses.fields(obj)),
        )
    if isinstance(obj, Mapping):
        return ("map", tuple(sorted((repr(k), fingerprint(v)) for k, v in obj.items())))
    if isinstance(obj, set | frozenset):
        return ("set", tuple(sorted(repr(fingerprint(x)) for x in obj)))
    if isinstance(obj, list | tuple):
        return (type(obj).__name__, tuple(fingerprint(x) for x in obj))
    return (type(obj).__name__, repr(obj))


@PROPERTY_SETTINGS
@given(scenarios())
def test_inputs_unchanged_and_deterministic(scn: Scenario) -> None:
    before = fingerprint((scn.slices, scn.classes, scn.claims, scn.allocated, scn.node))
    cache = SelectorCache()
    first = summary(run(scn, cache=cache))
    assert fingerprint((scn.slices, scn.classes, scn.claims, scn.allocated, scn.node)) == before
    # Same input, warm cache; then the slices in reverse order, cold cache: same answer.
    assert summary(run(scn, cache=cache)) == first
    assert summary(run(scn, slices=scn.slices[::-1])) == first
    # And one Allocator asked twice.
    allocator = Allocator(scn.claims, classes=scn.classes, snapshot=SliceSnapshot(scn.slices), allocated=scn.allocated)
    answers = []
    for _ in range(2):
        try:
            answers.append(summary(allocator.allocate(scn.node)))
        except errors.PodUnschedulable as exc:
            answers.append(("fatal", exc.reason))
    assert answers == [first, first]
    assert fingerprint((scn.slices, scn.classes, scn.claims, scn.allocated, scn.node)) == before
