"""Kube backend pieces that need no server: backoff sequences, line splitting, the
``check_response`` table, discovery parsing with canned documents, the store feeder's
resourceVersion guard and freed-device detection, the Lease helpers, the requeue registry and
token bucket."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from extender.backends.kube.client import check_response, status_message
from extender.backends.kube.discovery import missing_resources, pick_version
from extender.backends.kube.errors import AccessDenied, ApiNotServed, ApiStatusError, Gone, UnexpectedResponse
from extender.backends.kube.feeder import StoreFeeder
from extender.backends.kube.leader import LeaseObserver, holder_is
from extender.backends.kube.reflector import Backoff, Resource, WatchSettings, iter_lines
from extender.backends.kube.requeue import TokenBucket
from extender.core.errors import ApiUnavailable, InvalidObject, ObjectNotFound, WriteConflict
from extender.state.cache.store import ObjectStore
from extender.state.filter.rejected import RejectedPods

# --- backoff ----------------------------------------------------------------------------------


def test_backoff_doubles_up_to_the_cap_and_resets() -> None:
    backoff = Backoff(WatchSettings(backoff_initial=0.5, backoff_factor=2, backoff_max=4, jitter=0))
    assert [backoff.next() for _ in range(6)] == [0.5, 1, 2, 4, 4, 4]
    backoff.reset()
    assert backoff.next() == 0.5


def test_backoff_jitter_stays_within_its_band() -> None:
    settings = WatchSettings(backoff_initial=1, backoff_factor=2, backoff_max=8, jitter=0.25)
    backoff = Backoff(settings, random.Random(7))
    delays = [backoff.next() for _ in range(20)]
    bases = [1, 2, 4] + [8] * 17
    assert all(base * 0.75 <= d <= base * 1.25 for base, d in zip(bases, delays, strict=True))
    assert len(set(delays)) > 1  # jitter actually varies


def test_resource_paths_and_names() -> None:
    slices = Resource("ResourceSlice", "resource.k8s.io/v1beta1", "resourceslices")
    assert slices.path == "/apis/resource.k8s.io/v1beta1/resourceslices"
    assert slices.name == "resourceslices.resource.k8s.io"
    pods = Resource("Pod", "v1", "pods")
    assert (pods.path, pods.name) == ("/api/v1/pods", "pods")


# --- line splitting ---------------------------------------------------------------------------


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def _lines(*parts: bytes) -> list[bytes]:
    return [line async for line in iter_lines(_chunks(*parts))]


async def test_lines_split_across_chunks_and_blank_lines_skipped() -> None:
    assert await _lines(b'{"a":', b"1}\n\n", b'{"b":2}\n{"c"', b":3}") == [b'{"a":1}', b'{"b":2}', b'{"c":3}']


async def test_many_lines_in_one_chunk() -> None:
    assert await _lines(b"1\n2\n3\n") == [b"1", b"2", b"3"]


async def test_a_two_megabyte_line_in_small_chunks() -> None:
    line = orjson.dumps({"object": {"data": "x" * (2 * 1024 * 1024)}})
    parts = [line[i : i + 65536] for i in range(0, len(line), 65536)] + [b"\n", b"{}\n"]
    lines = await _lines(*parts)
    assert lines == [line, b"{}"]
    assert len(orjson.loads(lines[0])["object"]["data"]) == 2 * 1024 * 1024


# --- check_response ---------------------------------------------------------------------------


def _status(code: int, message: str) -> bytes:
    return orjson.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": message})


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (409, WriteConflict),
        (404, ObjectNotFound),
        (410, Gone),
        (401, AccessDenied),
        (403, AccessDenied),
        (429, ApiUnavailable),
        (500, ApiUnavailable),
        (503, ApiUnavailable),
        (400, InvalidObject),
        (422, InvalidObject),
        (405, UnexpectedResponse),
        (415, UnexpectedResponse),
    ],
)
def test_check_response_maps_each_status(code: int, error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        check_response(code, _status(code, "the message"), verb="update", resource="resourceclaims.resource.k8s.io")
    assert "the message" in str(info.value)
    cause = info.value.__cause__
    assert isinstance(cause, ApiStatusError)
    assert cause.status == code and cause.body is not None and cause.body["code"] == code


def test_success_raises_nothing() -> None:
    for code in (200, 201, 204):
        check_response(code, b"", verb="get", resource="pods")


def test_forbidden_names_verb_and_resource() -> None:
    with pytest.raises(AccessDenied) as info:
        check_response(
            403, _status(403, 'pods "x" is forbidden'), verb="list", resource="resourceslices.resource.k8s.io"
        )
    assert info.value.verb == "list" and info.value.resource == "resourceslices.resource.k8s.io"
    assert "cannot list resourceslices.resource.k8s.io" in info.value.reason


def test_non_status_bodies_are_cut_to_256_characters() -> None:
    message, decoded = status_message(b"<html>" + b"x" * 5000)
    assert decoded is None
    assert len(message) == 256 + 3 and message.endswith("...")
    with pytest.raises(ApiUnavailable) as info:
        check_response(502, b"<html>" + b"y" * 5000, verb="get", resource="pods")
    assert len(info.value.reason) < 400


# --- discovery parsing ------------------------------------------------------------------------


def _group(*versions: str) -> dict[str, object]:
    return {
        "kind": "APIGroup",
        "name": "resource.k8s.io",
        "versions": [{"groupVersion": f"resource.k8s.io/{v}", "version": v} for v in versions],
        "preferredVersion": {"groupVersion": f"resource.k8s.io/{versions[-1]}", "version": versions[-1]},
    }


@pytest.mark.parametrize(
    ("served", "chosen"),
    [
        (("v1", "v1beta2", "v1beta1"), "v1"),
        (("v1beta1", "v1beta2"), "v1beta2"),  # our order, not the server's preferredVersion
        (("v1alpha3", "v1beta1"), "v1beta1"),
        (("v1alpha3",), "v1alpha3"),
    ],
)
def test_pick_version_prefers_v1_then_betas(served: tuple[str, ...], chosen: str) -> None:
    assert pick_version(_group(*served)) == chosen


def test_pick_version_refuses_unknown_versions() -> None:
    with pytest.raises(ApiNotServed, match="v2alpha1"):
        pick_version(_group("v2alpha1"))
    with pytest.raises(ApiNotServed, match=r"\(none\)"):
        pick_version({"kind": "APIGroup", "versions": []})


def test_missing_resources_lists_what_is_not_served() -> None:
    doc = {"resources": [{"name": "resourceslices"}, {"name": "resourceclaims"}, {"name": "deviceclasses"}]}
    assert missing_resources(doc) == ["resourceclaims/status"]
    assert (
        missing_resources(
            {
                "resources": [
                    {"name": n} for n in ("resourceslices", "resourceclaims", "resourceclaims/status", "deviceclasses")
                ]
            }
        )
        == []
    )


# --- feeder -----------------------------------------------------------------------------------


def _claim(name: str, rv: int, *, allocated: bool = False) -> dict[str, object]:
    status: dict[str, object] = {}
    if allocated:
        status["allocation"] = {
            "devices": {"results": [{"request": "req-0", "driver": "driver-a", "pool": "pool-1", "device": "device-1"}]}
        }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": str(rv)},
        "spec": {"devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": "class-a"}}]}},
        "status": status,
    }


def _slice(name: str, rv: int, devices: int) -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "resourceVersion": str(rv), "managedFields": [{"manager": "x"}]},
        "spec": {
            "driver": "driver-a",
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "nodeName": "node-1",
            "devices": [{"name": f"device-{i}"} for i in range(devices)],
        },
    }


def test_feeder_skips_events_older_than_a_write() -> None:
    store = ObjectStore()
    feeder = StoreFeeder(store)
    feeder.replace("ResourceClaim", [_claim("c", 5)])
    feeder.written(_claim("c", 7, allocated=True))
    feeder.apply("MODIFIED", _claim("c", 6))  # the watch still catching up
    assert store.claims["default/c"].allocation is not None
    assert store.raw_claims["default/c"]["metadata"]["resourceVersion"] == "7"
    feeder.apply("MODIFIED", _claim("c", 7, allocated=True))  # the watch confirms: no change
    feeder.apply("MODIFIED", _claim("c", 8))
    assert store.claims["default/c"].allocation is None


def test_feeder_tombstone_stops_a_late_write_from_resurrecting() -> None:
    store = ObjectStore()
    feeder = StoreFeeder(store)
    feeder.replace("ResourceClaim", [_claim("c", 5)])
    feeder.apply("DELETED", _claim("c", 9))
    feeder.written(_claim("c", 8, allocated=True))  # answer of a write made before the delete
    assert "default/c" not in store.claims
    feeder.apply("ADDED", _claim("c", 12))  # re-created: newer, accepted
    assert "default/c" in store.claims


async def test_a_fill_does_not_bring_back_what_our_own_delete_removed_while_it_paused() -> None:
    """A re-list after a 401 fills the store a step at a time; a claim our DELETE removed during a
    pause is not upserted again from the older list."""
    store = ObjectStore()
    feeder = StoreFeeder(store)
    feeder.replace("ResourceClaim", [_claim("a", 3), _claim("b", 4)])
    steps: list[int] = []

    async def pause() -> None:
        steps.append(1)
        if len(steps) == 1:  # after the first object: our DELETE of "b" answers
            feeder.removed(_claim("b", 9))

    await feeder.fill("ResourceClaim", [_claim("a", 5), _claim("b", 4)], pause)
    assert sorted(store.claims) == ["default/a"]
    assert store.raw_claims["default/a"]["metadata"]["resourceVersion"] == "5"


def test_feeder_replace_removes_what_the_list_lacks_and_drops_managed_fields() -> None:
    store = ObjectStore()
    feeder = StoreFeeder(store)
    feeder.replace("ResourceSlice", [_slice("s1", 1, 1), _slice("s2", 2, 1)])
    feeder.replace("ResourceSlice", [_slice("s2", 3, 2)])
    assert sorted(store.slices) == ["s2"]
    assert len(store.slices["s2"].devices) == 2
    raw = _slice("s3", 4, 1)
    feeder.apply("ADDED", raw)
    assert "managedFields" not in raw["metadata"]  # type: ignore[operator]


def test_feeder_reports_devices_freed() -> None:
    freed: list[str] = []
    store = ObjectStore()
    feeder = StoreFeeder(store, on_freed=freed.append)
    feeder.replace("ResourceSlice", [_slice("s1", 1, 1)])
    feeder.replace("ResourceClaim", [_claim("a", 2, allocated=True), _claim("b", 3, allocated=True)])
    freed.clear()
    feeder.apply("MODIFIED", _slice("s1", 4, 1))  # same size: nothing freed
    feeder.apply("MODIFIED", _claim("a", 5, allocated=True))
    assert freed == []
    feeder.apply("MODIFIED", _claim("a", 6))
    feeder.apply("DELETED", _claim("b", 7, allocated=True))
    feeder.apply("MODIFIED", _slice("s1", 8, 3))
    feeder.apply("ADDED", _slice("s2", 9, 1))
    assert freed == ["claim default/a deallocated", "claim default/b deleted", "slice s1 grew", "slice s2 added"]


def test_feeder_rejects_an_undecodable_object_without_keeping_a_stale_copy() -> None:
    store = ObjectStore()
    feeder = StoreFeeder(store)
    feeder.replace("ResourceClaim", [_claim("c", 1)])
    broken = _claim("c", 2)
    broken["spec"] = {"devices": {"requests": "not a list"}}
    feeder.apply("MODIFIED", broken)
    assert "default/c" not in store.claims
    assert feeder.rejected == {"ResourceClaim": 1}


# --- leader helpers ---------------------------------------------------------------------------


def test_holder_identity_is_hostname_underscore_uuid() -> None:
    assert holder_is("sched-0_4f1c2b9e-1111-2222-3333-444455556666", "sched-0")
    assert holder_is("sched-0", "sched-0")
    assert not holder_is("sched-1_4f1c2b9e", "sched-0")
    assert not holder_is("", "sched-0")
    assert not holder_is("sched-0-x_abc", "sched-0")


def test_lease_expiry_is_judged_from_when_we_saw_the_record_change() -> None:
    observer = LeaseObserver()
    # renewTime says an hour ago (another machine's clock, skewed): it does not matter, only when
    # we saw the record change does (client-go's observedTime)
    spec = {"holderIdentity": "s_1", "renewTime": "2025-01-01T11:00:00.000000Z", "leaseDurationSeconds": 15}
    observer.observe(spec, now=100.0)
    assert not observer.expired(114.9) and observer.expires_at == 115.0
    observer.observe(spec, now=110.0)  # read again, unchanged: the clock keeps running from 100
    assert observer.expired(115.1)
    renewed = {**spec, "renewTime": "2025-01-01T10:00:00.000000Z"}  # even a renewal "in the past"
    observer.observe(renewed, now=116.0)
    # made at some moment after the read at 110: dated from there, the safe end
    assert not observer.expired(124.9) and observer.expired(125.1)


def test_a_lease_without_a_duration_cannot_expire() -> None:
    observer = LeaseObserver()
    observer.observe({"holderIdentity": "s_1"}, now=0.0)
    assert observer.expires_at is None and not observer.expired(1e9)


# --- requeue ----------------------------------------------------------------------------------


def _pod(name: str, uid: str = "u") -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid}}


def test_rejected_pods_expire_are_bounded_and_taken_once() -> None:
    now = [0.0]
    registry = RejectedPods(2, ttl_seconds=10, clock=lambda: now[0])
    registry.rejected(_pod("a", "ua"))
    now[0] = 5
    registry.rejected(_pod("b", "ub"))
    registry.rejected(_pod("c", "uc"))  # over the bound: "a" (oldest) is forgotten
    assert "ua" not in registry and len(registry) == 2
    now[0] = 12  # "b" and "c" rejected at 5: still fresh
    registry.rejected(_pod("b", "ub"))  # a newer rejection moves the entry
    taken = registry.take()
    assert [(p.name, p.uid) for p in taken] == [("c", "uc"), ("b", "ub")]
    assert registry.take() == []  # each rejection is taken once
    assert len(registry) == 2  # but the pods stay listed (the device map's pending list)
    now[0] = 20
    registry.rejected(_pod("c", "uc"))
    assert [p.name for p in registry.take()] == ["c"]  # "b" was not rejected again


async def test_token_bucket_waits_for_tokens_beyond_the_burst() -> None:
    now = [0.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    bucket = TokenBucket(2.0, 3, clock=lambda: now[0], sleep=sleep)
    for _ in range(5):
        await bucket.acquire()
    assert slept == [0.5, 0.5]
    assert now[0] == 1.0


@pytest.mark.parametrize(
    ("kind", "api_version", "table"),
    [
        ("PodSchedulingContext", "resource.k8s.io/v1alpha3", "scheduling_contexts"),
        ("PodDisruptionBudget", "policy/v1", "budgets"),
    ],
)
def test_a_relist_forgets_contexts_and_budgets_that_are_gone(kind: str, api_version: str, table: str) -> None:
    from extender.state.cache.store import ObjectStore

    store = ObjectStore()
    feeder = StoreFeeder(store)

    def obj(name: str) -> dict[str, Any]:
        return {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": name, "namespace": "default", "resourceVersion": "5"},
        }

    feeder.replace(kind, [obj("a"), obj("b")])
    assert set(getattr(store, table)) == {"default/a", "default/b"}
    feeder.replace(kind, [obj("b")])
    assert set(getattr(store, table)) == {"default/b"}


def test_bodies_are_encoded_as_go_encodes_them() -> None:
    """The API server keeps a claim's opaque parameters as the bytes it was sent and compares them
    when it checks the spec did not change: they go back escaped as Go (kubectl, client-go) wrote
    them, or an update of the claim is refused as changing an immutable field."""
    from extender.backends.kube.client import encode_body

    body = {"env": "A=1 && B=<2>", "line": "x\u2028y\u2029z", "plain": "ok"}
    data = encode_body(body)
    assert data == (b'{"env":"A=1 \\u0026\\u0026 B=\\u003c2\\u003e","line":"x\\u2028y\\u2029z","plain":"ok"}')
    assert orjson.loads(data) == body  # the same JSON value
