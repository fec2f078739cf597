"""Objects the API server would never accept, arriving by watch (issue 13, part 5): nothing crashes,
the object is marked invalid with its reason, and the rest keeps working. A malformed slice makes
its pool invalid (that node is unresolvable, the others are unaffected); a malformed claim cannot be
used (its pod gets ``Error`` naming why) but keeps the devices its status names, so they are not
given to anyone else; an object without a name is refused and counted."""

from __future__ import annotations

import asyncio
from typing import Any

from extender.core.answers import INVALID_POOLS
from tests import manifests as m
from tests.backends.kube.test_backend import claim_in_fake, stack, until
from tests.fakes import FakeApiServer

NODES = ["node-1", "node-2"]
__all__ = ["stack"]  # the fixture, shared with test_backend.py


def allocated(name: str, node: str, device: str, pod: str) -> dict[str, Any]:
    claim = m.claim(name)
    claim["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpus", "driver": "gpu.example.com", "pool": node, "device": device}]},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            },
        },
        "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}],
    }
    return claim


async def test_a_malformed_claim_is_unusable_but_keeps_its_devices(fake: FakeApiServer, stack: Any) -> None:
    claims = [allocated("c1", "node-1", "gpu-0", "p1"), m.pod("p1", "c1"), m.claim("c2"), m.pod("p2", "c2")]
    backend, service = await stack(*m.cluster(*claims, nodes=2, gpus=1))
    broken = claim_in_fake(fake, "c1")
    broken["spec"]["devices"]["requests"] = "not a list"  # the API server would refuse this
    fake.put_object(broken)
    await until(lambda: "default/c1" in backend.store.invalid_claims)
    assert "requests" in backend.store.invalid_claims["default/c1"]
    assert backend.feeder.rejected["ResourceClaim"] == 1
    # its pod is told why; its device on node-1 is still taken
    outcome = service.filter(m.pod("p1", "c1"), NODES)
    assert outcome.error.startswith("resourceclaim default/c1 cannot be read: ")
    assert service.filter(m.pod("p2", "c2"), NODES).node_names == ["node-2"]
    await service.bind("default", "p2", "uid-p2", "node-2")
    # a readable version again: usable again, still holding its device
    fake.put_object(allocated("c1", "node-1", "gpu-0", "p1"))
    await until(lambda: "default/c1" not in backend.store.invalid_claims and "default/c1" in backend.store.claims)
    assert service.filter(m.pod("p1", "c1"), NODES).node_names == ["node-1"]


async def test_a_malformed_claim_seen_first_holds_what_its_status_names(fake: FakeApiServer, stack: Any) -> None:
    broken = allocated("c1", "node-1", "gpu-0", "p1")
    broken["spec"] = {"devices": {"requests": [{"name": 7}]}}
    backend, service = await stack(*m.cluster(broken, m.claim("c2"), m.pod("p2", "c2"), nodes=2, gpus=1))
    assert "default/c1" in backend.store.invalid_claims
    assert service.filter(m.pod("p2", "c2"), NODES).node_names == ["node-2"]
    fake.delete_object("ResourceClaim", "default", "c1", group="resource.k8s.io")
    await until(lambda: "default/c1" not in backend.store.invalid_claims)
    assert service.filter(m.pod("p2", "c2"), NODES).node_names == NODES  # deleted: its device is free


async def test_a_malformed_claim_is_forgotten_by_a_relist(fake: FakeApiServer, stack: Any) -> None:
    broken = allocated("c1", "node-1", "gpu-0", "p1")
    broken["spec"] = {"devices": {"requests": [{"name": 7}]}}
    backend, service = await stack(*m.cluster(broken, m.claim("c2"), m.pod("p2", "c2"), nodes=1, gpus=1))
    await fake.wait_for_watches(6, timeout=30)
    fake.drop_watches()
    fake.delete_object("ResourceClaim", "default", "c1", group="resource.k8s.io")
    fake.compact()  # the resumed watch gets 410 and lists again
    await until(lambda: "default/c1" not in backend.store.invalid_claims)
    assert service.filter(m.pod("p2", "c2"), ["node-1"]).node_names == ["node-1"]


async def test_a_malformed_slice_makes_only_its_pool_invalid(fake: FakeApiServer, stack: Any) -> None:
    backend, service = await stack(*m.cluster(m.claim("c1"), m.pod("p1", "c1")))
    broken = m.gpu_slice("node-1", 2)
    broken["spec"]["devices"] = [{"name": "gpu-0"}, {"name": 42, "attributes": "no"}]
    fake.put_object(broken)
    await until(lambda: backend.store.slices["node-1-gpus"].invalid_reason is not None)
    outcome = service.filter(m.pod("p1", "c1"), NODES)
    assert outcome.node_names == ["node-2"] and outcome.unresolvable == {"node-1": INVALID_POOLS}
    fake.put_object(m.gpu_slice("node-1", 2))  # repaired
    await until(lambda: backend.store.slices["node-1-gpus"].invalid_reason is None)
    assert service.filter(m.pod("p1", "c1"), NODES).node_names == NODES


async def test_objects_without_a_name_or_unreadable_classes_hurt_nothing_else(fake: FakeApiServer, stack: Any) -> None:
    backend, service = await stack(*m.cluster(m.claim("c1"), m.pod("p1", "c1")))
    other = m.gpu_class()
    other["metadata"]["name"] = "other"
    other["spec"]["selectors"] = "nope"
    fake.put_object(other)
    fake.put_object(m.node("node-3") | {"metadata": {"name": "node-3", "labels": ["not", "a", "map"]}})
    await until(lambda: backend.feeder.rejected.get("DeviceClass") == 1 and backend.feeder.rejected.get("Node") == 1)
    assert "other" not in backend.store.classes and "node-3" not in backend.store.nodes
    assert backend.synced
    assert service.filter(m.pod("p1", "c1"), NODES).node_names == NODES


def unreadable(claim: dict[str, Any], **labels: str) -> dict[str, Any]:
    """``claim`` with a spec the decoder refuses (and labels, to make a new version)."""
    claim = {**claim, "spec": {"devices": {"requests": "not a list"}}}
    claim["metadata"] = {**claim["metadata"], "labels": labels}
    return claim


async def test_an_unreadable_claim_keeps_what_it_held_through_later_versions(fake: FakeApiServer, stack: Any) -> None:
    """Its devices stay held across several unreadable versions, a re-list of one, and a version
    whose status names only part of them: held only grows until the claim is readable or gone."""
    both = allocated("c1", "node-1", "gpu-0", "p1")
    both["status"]["allocation"]["devices"]["results"].append(
        {"request": "gpus", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-1"}
    )
    objects = m.cluster(both, m.pod("p1", "c1"), m.claim("c2"), m.pod("p2", "c2"), nodes=2, gpus=2)
    backend, service = await stack(*objects)
    partly = unreadable(claim_in_fake(fake, "c1"))
    partly["status"]["allocation"]["devices"]["results"][1]["pool"] = 7  # gpu-1 no longer readable
    fake.put_object(partly)
    await until(lambda: "default/c1" in backend.store.invalid_claims)
    fake.put_object(unreadable(claim_in_fake(fake, "c1"), again="1"))  # another unreadable version
    await until(lambda: backend.feeder.rejected["ResourceClaim"] == 2)
    assert service.filter(m.pod("p2", "c2"), NODES).node_names == ["node-2"]  # gpu-0 and gpu-1 held
    await fake.wait_for_watches(6, timeout=30)
    lists = backend.reflectors["ResourceClaim"].lists
    fake.drop_watches()
    fake.put_object(m.node("node-3"))  # history moves on, then is compacted:
    fake.compact()  # the resumed watch gets 410, and a re-list delivers the unreadable version again
    await until(lambda: backend.reflectors["ResourceClaim"].lists > lists)
    assert service.filter(m.pod("p2", "c2"), NODES).node_names == ["node-2"]


async def test_a_bind_in_flight_keeps_its_devices_when_its_claim_turns_unreadable(
    fake: FakeApiServer, stack: Any
) -> None:
    backend, service = await stack(
        *m.cluster(m.claim("c1"), m.pod("p1", "c1"), m.claim("c2"), m.pod("p2", "c2"), nodes=1, gpus=1)
    )
    fake.hang("PUT", r"/resourceclaims/c1$")  # the bind's finalizer write never answers
    bind = asyncio.create_task(service.bind("default", "p1", "uid-p1", "node-1"))
    await until(lambda: bool(fake.requests_to("PUT", r"/resourceclaims/c1$")))
    fake.put_object(unreadable(claim_in_fake(fake, "c1")))
    await until(lambda: "default/c1" in backend.store.invalid_claims)
    assert len(service.ledger) == 1  # the bind's entry is not taken for a claim that is gone
    assert service.filter(m.pod("p2", "c2"), ["node-1"]).node_names == []  # its GPU stays taken
    bind.cancel()
    fake.release_hangs()
