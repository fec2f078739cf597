"""Tests for extender.core.explain: why a pod's claims do not fit a node.

Covers the per-request counts (class matches, selector matches, free, blocked by taints, counters
and capacity), verdicts and one-line messages, pool problems, CEL and class errors reported
instead of raised, blame of claim constraints and of request/claim combinations, firstAvailable
and All requests, and the JSON shape of ``to_dict``. The allocator itself is tested elsewhere;
here it only decides fit / no fit, as in production.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import orjson
import pytest

from extender.core.answers import NO_CLASS_DEVICES
from extender.core.cel import SelectorCache
from extender.core.explain import (
    CANNOT_ALLOCATE,
    FITS,
    VERDICT_BLOCKED,
    VERDICT_ERROR,
    VERDICT_FITS,
    VERDICT_IN_USE,
    VERDICT_NO_ALTERNATIVE,
    VERDICT_NO_CLASS_MATCH,
    VERDICT_NO_SELECTOR_MATCH,
    VERDICT_TOO_FEW,
    NodeExplanation,
    RequestExplanation,
    explain_node,
)
from extender.core.model import (
    ALLOCATION_MODE_ALL,
    AllocatedState,
    AttributeValue,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceCapacity,
    DeviceClass,
    DeviceConstraint,
    DeviceID,
    DeviceRequest,
    DeviceTaint,
    DeviceToleration,
    ExactRequest,
    NodeInfo,
    PoolRef,
    ResourceClaim,
    ResourceSlice,
)
from extender.core.pools import SliceSnapshot
from extender.core.quantity import Quantity

DRIVER = "driver-a"
NODE = NodeInfo(name="node-1", labels={"region": "region-1"})
CLASS_A = DeviceClass(name="class-a", selectors=(f'device.driver == "{DRIVER}"',))
CLASS_B = DeviceClass(name="class-b", selectors=('device.driver == "driver-b"',))
MODEL = f"{DRIVER}/model"


def dev(name: str, model: str = "a", **fields: object) -> Device:
    attributes: dict[str, AttributeValue] = {"model": model}
    return Device(name=name, attributes=attributes, **fields)  # type: ignore[arg-type]


def device_slice(
    *devices: Device, name: str = "slice-1", pool: str = "pool-1", count: int = 1, **fields: object
) -> ResourceSlice:
    fields.setdefault("node_name", NODE.name)
    return ResourceSlice(
        name=name,
        driver=DRIVER,
        pool=PoolRef(name=pool, generation=1, resource_slice_count=count),
        devices=devices,
        **fields,  # type: ignore[arg-type]
    )


def exact(
    name: str = "req-0",
    *,
    device_class: str = "class-a",
    count: int = 1,
    selectors: tuple[str, ...] = (),
    **fields: object,
) -> ExactRequest:
    return ExactRequest(
        name=name,
        device_class_name=device_class,
        count=count,
        selectors=selectors,
        **fields,  # type: ignore[arg-type]
    )


def claim(
    *requests: ExactRequest | DeviceRequest,
    name: str = "claim-0",
    constraints: Sequence[DeviceConstraint] = (),
) -> ResourceClaim:
    wrapped = tuple(r if isinstance(r, DeviceRequest) else DeviceRequest(name=r.name, exactly=r) for r in requests)
    return ResourceClaim(namespace="default", name=name, requests=wrapped, constraints=tuple(constraints))


def explain(
    claims: Sequence[ResourceClaim] | ResourceClaim,
    slices: Iterable[ResourceSlice],
    *,
    allocated: Iterable[str] = (),
    classes: Iterable[DeviceClass] = (CLASS_A, CLASS_B),
) -> NodeExplanation:
    allocated_state = AllocatedState(devices={DeviceID(*text.split("/")) for text in allocated})
    return explain_node(
        [claims] if isinstance(claims, ResourceClaim) else claims,
        NODE,
        snapshot=SliceSnapshot(slices),
        classes={c.name: c for c in classes},
        allocated=allocated_state,
    )


def only_request(explanation: NodeExplanation) -> RequestExplanation:
    (claim_explanation,) = explanation.claims
    (request,) = claim_explanation.requests
    return request


def counts(request: RequestExplanation) -> Mapping[str, int]:
    return {
        "wanted": request.wanted,
        "class": request.class_matches,
        "selectors": request.selector_matches,
        "free": request.free,
        "taint": request.blocked_by_taint,
        "counters": request.blocked_by_counters,
        "capacity": request.blocked_by_capacity,
        "usable": request.usable,
    }


# --- fit ----------------------------------------------------------------------------------------


def test_a_fitting_node_gets_a_short_explanation() -> None:
    result = explain(claim(exact()), [device_slice(dev("device-1"))])
    assert result == NodeExplanation(node="node-1", fits=True, message=FITS)


# --- counts, verdicts, messages -----------------------------------------------------------------


def test_no_device_matches_the_class() -> None:
    result = explain(claim(exact(device_class="class-b")), [device_slice(dev("device-1"))])
    # The filter's own answer for the node: no device of the class at all, so unresolvable there.
    assert (result.fits, result.message, result.unresolvable) == (False, NO_CLASS_DEVICES, True)
    request = only_request(result)
    assert request.verdict == VERDICT_NO_CLASS_MATCH
    assert counts(request)["class"] == 0
    assert request.message == "needs 1, but no device matches device class class-b"
    assert result.detail == "claim default/claim-0: request req-0: needs 1, but no device matches device class class-b"


def test_class_matches_but_request_selectors_do_not() -> None:
    request = only_request(
        explain(
            claim(exact(selectors=(f'device.attributes["{DRIVER}"].model == "z"',))),
            [device_slice(dev("device-1"), dev("device-2"))],
        )
    )
    assert request.verdict == VERDICT_NO_SELECTOR_MATCH
    assert (request.class_matches, request.selector_matches) == (2, 0)
    assert request.message == "needs 1, 2 devices match device class class-a but none the request selectors"


def test_too_few_matching_devices_and_those_in_use() -> None:
    request = only_request(
        explain(
            claim(exact(count=2, selectors=(f'device.attributes["{DRIVER}"].model == "a"',))),
            [device_slice(dev("device-1", "a"), dev("device-2", "b"))],
            allocated=["driver-a/pool-1/device-1"],
        )
    )
    assert request.verdict == VERDICT_TOO_FEW
    assert counts(request) == {
        "wanted": 2, "class": 2, "selectors": 1, "free": 0,
        "taint": 0, "counters": 0, "capacity": 0, "usable": 0,
    }  # fmt: skip
    assert request.message == "needs 2, only 1 device matches the selectors and all are in use"


def test_enough_matching_devices_but_not_enough_free() -> None:
    request = only_request(
        explain(
            claim(exact(count=2)),
            [device_slice(dev("device-1"), dev("device-2"), dev("device-3"))],
            allocated=["driver-a/pool-1/device-1", "driver-a/pool-1/device-3"],
        )
    )
    assert request.verdict == VERDICT_IN_USE
    assert (request.selector_matches, request.free, request.usable) == (3, 1, 1)
    assert request.message == "needs 2, 3 devices match the selectors but only 1 is free"


def test_untolerated_taint_blocks_and_a_toleration_lifts_it() -> None:
    tainted = dev("device-1", taints=(DeviceTaint(key="maintenance", effect="NoSchedule"),))
    slices = [device_slice(tainted)]
    request = only_request(explain(claim(exact()), slices))
    assert request.verdict == VERDICT_BLOCKED
    assert (request.free, request.blocked_by_taint, request.usable) == (1, 1, 0)
    assert request.message == (
        "needs 1, 1 free matching device but only 0 usable (blocked: untolerated taints: 1 (maintenance:NoSchedule))"
    )

    tolerating = exact(tolerations=(DeviceToleration(key="maintenance", operator="Exists"),))
    assert explain(claim(tolerating), slices).fits


def test_exhausted_shared_counters_block() -> None:
    def consumes(amount: str) -> tuple[CounterConsumption, ...]:
        return (CounterConsumption(counter_set="gpu-0", counters={"memory": Quantity.parse(amount)}),)

    counters = ResourceSlice(
        name="counters",
        driver=DRIVER,
        pool=PoolRef(name="pool-1", generation=1, resource_slice_count=2),
        shared_counters=(CounterSet(name="gpu-0", counters={"memory": Quantity.parse("8Gi")}),),
    )
    devices = device_slice(
        dev("whole", consumes_counters=consumes("6Gi")),
        dev("half", consumes_counters=consumes("4Gi")),
        dev("quarter", consumes_counters=consumes("2Gi")),
        count=2,
    )
    # "whole" is allocated elsewhere: 2Gi are left, enough for "quarter" only.
    request = only_request(explain(claim(exact(count=2)), [counters, devices], allocated=["driver-a/pool-1/whole"]))
    assert request.verdict == VERDICT_BLOCKED
    assert (request.free, request.blocked_by_counters, request.usable) == (2, 1, 1)
    assert "exhausted shared counters: 1" in request.message


def test_insufficient_capacity_blocks() -> None:
    shared = dev(
        "device-1",
        allow_multiple_allocations=True,
        capacity={"memory": DeviceCapacity(value=Quantity.parse("1Gi"))},
    )
    wants_more = exact(capacity_requests={"memory": Quantity.parse("2Gi")})
    request = only_request(explain(claim(wants_more), [device_slice(shared)]))
    assert request.verdict == VERDICT_BLOCKED
    assert (request.free, request.blocked_by_capacity, request.usable) == (1, 1, 0)
    assert "insufficient capacity: 1" in request.message


def test_admin_access_counts_devices_other_claims_hold_as_free() -> None:
    admin = exact(admin_access=True)
    result = explain(
        claim(admin, exact("req-1", device_class="class-b")),
        [device_slice(dev("device-1"))],
        allocated=["driver-a/pool-1/device-1"],
    )
    admin_request, other = result.claims[0].requests
    assert (admin_request.verdict, admin_request.free, admin_request.admin_access) == (VERDICT_FITS, 1, True)
    assert other.verdict == VERDICT_NO_CLASS_MATCH
    assert result.claims[0].message.startswith("request req-1: ")


# --- All and firstAvailable ------------------------------------------------------------------------


def test_all_mode_needs_every_matching_device_free() -> None:
    request = only_request(
        explain(
            claim(exact(allocation_mode=ALLOCATION_MODE_ALL)),
            [device_slice(dev("device-1"), dev("device-2"))],
            allocated=["driver-a/pool-1/device-2"],
        )
    )
    assert (request.all_devices, request.wanted, request.verdict) == (True, 2, VERDICT_IN_USE)
    assert request.message == "needs all 2 matching devices, but 1 is in use"
    assert request.to_dict()["allocationMode"] == "All"


def test_first_available_lists_every_alternative() -> None:
    request = DeviceRequest(
        name="req-0",
        first_available=(
            exact("large", selectors=(f'device.attributes["{DRIVER}"].model == "large"',)),
            exact("two", count=2),
        ),
    )
    result = explain(claim(request), [device_slice(dev("device-1"))])
    parent = only_request(result)
    assert parent.verdict == VERDICT_NO_ALTERNATIVE
    assert [(s.request, s.verdict) for s in parent.subrequests] == [
        ("req-0/large", VERDICT_NO_SELECTOR_MATCH),
        ("req-0/two", VERDICT_TOO_FEW),
    ]
    assert parent.message.startswith("none of the 2 alternatives fits; req-0/large: needs 1, 1 device matches")
    as_dict = parent.to_dict()
    assert "wanted" not in as_dict
    subrequests = as_dict["subrequests"]
    assert isinstance(subrequests, list)
    assert [s["request"] for s in subrequests] == ["req-0/large", "req-0/two"]


# --- pools -----------------------------------------------------------------------------------------


def test_incomplete_pool_is_reported_and_has_no_usable_devices() -> None:
    result = explain(claim(exact()), [device_slice(dev("device-1"), count=2)])
    assert result.message == CANNOT_ALLOCATE
    assert [(p.pool, p.status) for p in result.pools] == [("pool-1", "incomplete")]
    assert only_request(result).message == "needs 1, but the node has no devices in usable pools"


def test_invalid_pool_makes_the_node_unresolvable() -> None:
    result = explain(claim(exact()), [device_slice(dev("device-1"), dev("device-1"))])
    assert (result.fits, result.unresolvable) == (False, True)
    assert result.message == "invalid resource pools were encountered"
    (pool,) = result.pools
    assert (pool.status, pool.reason) == ("invalid", "duplicate device name device-1")


# --- errors are reported, not raised --------------------------------------------------------------


def test_cel_runtime_error_is_reported() -> None:
    strict = DeviceClass(name="strict", selectors=(f'device.attributes["{DRIVER}"].size == "big"',))
    result = explain(claim(exact(device_class="strict")), [device_slice(dev("device-1"))], classes=[strict])
    assert result.error is not None
    assert result.message == result.error
    assert "class strict: selector #0: CEL runtime error" in result.error
    request = only_request(result)
    assert request.verdict == VERDICT_ERROR
    assert request.error is not None and "CEL runtime error" in request.error


def test_cel_compile_error_in_a_request_selector_is_reported() -> None:
    result = explain(claim(exact(selectors=("device.driver ==",))), [device_slice(dev("device-1"))])
    assert result.error is not None and "claim default/claim-0: selector #0: CEL compile error" in result.error
    request = only_request(result)
    assert (request.verdict, request.class_matches, request.selector_matches) == (VERDICT_ERROR, 1, 0)


def test_missing_device_class_is_reported() -> None:
    result = explain(claim(exact(device_class="nope")), [device_slice(dev("device-1"))])
    assert result.error is not None and "could not retrieve device class nope" in result.error
    assert only_request(result).verdict == VERDICT_ERROR


# --- when the counts are enough ---------------------------------------------------------------------


def test_blocking_match_attribute_constraint_is_named() -> None:
    result = explain(
        claim(exact("req-0"), exact("req-1"), constraints=[DeviceConstraint(match_attribute=MODEL)]),
        [device_slice(dev("device-1", "a"), dev("device-2", "b"))],
    )
    assert result.message == CANNOT_ALLOCATE
    (claim_explanation,) = result.claims
    assert all(r.verdict == VERDICT_FITS for r in claim_explanation.requests)
    (constraint,) = claim_explanation.constraints
    assert constraint.blocking
    assert claim_explanation.message == (
        f"constraint #0 (matchAttribute {MODEL}) cannot be satisfied by the usable devices"
    )
    assert result.detail == f"claim default/claim-0: {claim_explanation.message}"


def test_only_the_constraint_that_blocks_is_marked() -> None:
    result = explain(
        claim(
            exact("req-0", count=2),
            constraints=[
                DeviceConstraint(match_attribute=f"{DRIVER}/kind"),
                DeviceConstraint(distinct_attribute=MODEL),
            ],
        ),
        [device_slice(*[Device(name=f"device-{i}", attributes={"kind": "gpu", "model": "a"}) for i in range(2)])],
    )
    assert [c.blocking for c in result.claims[0].constraints] == [False, True]
    assert f"distinctAttribute {MODEL}" in result.detail


def test_requests_that_fit_alone_but_not_together() -> None:
    result = explain(
        claim(exact("req-0", count=2), exact("req-1", count=2)),
        [device_slice(dev("device-1"), dev("device-2"), dev("device-3"))],
    )
    assert all(r.fits for r in result.claims[0].requests)
    assert result.claims[0].message.startswith(
        "each request has enough usable devices on its own, but not all together"
    )


def test_claims_that_fit_alone_but_not_together() -> None:
    result = explain(
        [claim(exact(count=2), name="claim-0"), claim(exact(count=2), name="claim-1")],
        [device_slice(dev("device-1"), dev("device-2"), dev("device-3"))],
    )
    assert [c.message for c in result.claims] == ["", ""]
    assert result.detail.startswith("each claim fits on its own, but not all together")


# --- shape -----------------------------------------------------------------------------------------


def test_to_dict_is_json_ready_camel_case_and_node_agnostic_message() -> None:
    result = explain(
        claim(exact(count=2), constraints=[DeviceConstraint(requests=("req-0",), match_attribute=MODEL)]),
        [device_slice(dev("device-1"))],
    )
    data = orjson.loads(orjson.dumps(result.to_dict()))
    assert data["node"] == "node-1" and data["fits"] is False
    assert "node-1" not in data["message"]
    request = data["claims"][0]["requests"][0]
    assert set(request) >= {
        "request", "deviceClass", "wanted", "classMatches", "selectorMatches", "free",
        "blockedByTaint", "blockedByCounters", "blockedByCapacity", "usable", "verdict", "message",
    }  # fmt: skip
    assert data["claims"][0]["constraints"] == [
        {"index": 0, "requests": ["req-0"], "matchAttribute": MODEL, "blocking": False}
    ]
    assert data["pools"] == [{"driver": DRIVER, "pool": "pool-1", "status": "ok", "devices": 1}]


@pytest.mark.parametrize("allocated", [(), ("driver-a/pool-1/device-1",)])
def test_explaining_changes_nothing_it_is_given(allocated: tuple[str, ...]) -> None:
    state = AllocatedState(devices={DeviceID(*a.split("/")) for a in allocated})
    before = set(state.devices)
    explain_node(
        [claim(exact(count=3))],
        NODE,
        snapshot=SliceSnapshot([device_slice(dev("device-1"), dev("device-2"))]),
        classes={"class-a": CLASS_A},
        allocated=state,
    )
    assert state.devices == before and not state.shared_ids


def test_counting_reuses_the_selector_cache() -> None:
    """A second explanation over the same slices evaluates no CEL: results come from the cache."""
    cache = SelectorCache()
    snapshot = SliceSnapshot([device_slice(dev("device-1"), dev("device-2"))])
    claims = [claim(exact(count=3, selectors=(f'device.attributes["{DRIVER}"].model == "a"',)))]
    first = explain_node(claims, NODE, snapshot=snapshot, classes={"class-a": CLASS_A}, selectors=cache)
    misses = cache.stats.result_misses
    assert misses > 0
    second = explain_node(claims, NODE, snapshot=snapshot, classes={"class-a": CLASS_A}, selectors=cache)
    assert cache.stats.result_misses == misses
    assert first == second
    assert only_request(second).verdict == VERDICT_TOO_FEW
