"""Claims of classic DRA (v1alpha3 ``spec.controller``: their driver's controller allocates them,
issue 14) until the extender drives that protocol: never allocated with structured devices, even
where devices match their class (the bug seen on a 1.31 cluster); a claim the driver allocated is
used like any allocated claim (pinned to its node, reserved at bind); one asked to be deallocated
waits (``Error``). The decoding of the classic fields and of PodSchedulingContext (with the API
server's limits) is here too."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.core.allocator import allocate_claims
from extender.core.answers import CLASSIC_NOT_SUPPORTED
from extender.core.convert import decode_object, decode_pod_scheduling_context
from extender.core.errors import InvalidObject, PodUnschedulable, Transient
from extender.core.model import DeviceClass, NodeInfo, ResourceClaim
from extender.state.service import SchedulingService
from extender.views.debug import DebugViews
from tests import manifests as m

ALPHA = "resource.k8s.io/v1alpha3"
NODES = ["node-1", "node-2"]


def classic_class() -> dict[str, Any]:
    """A v1alpha3 class with no selectors (classic drivers need none): every device matches it."""
    return {
        "apiVersion": ALPHA,
        "kind": "DeviceClass",
        "metadata": {"name": "classic"},
        "spec": {
            "suitableNodes": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}
        },
    }


def classic_claim(name: str, *, allocated_on: str | None = None, deallocation: bool = False) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "apiVersion": ALPHA,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "controller": "classic.example.com",
            "devices": {"requests": [{"name": "r", "deviceClassName": "classic"}]},
        },
    }
    if allocated_on is not None:
        claim["status"] = {
            "allocation": {
                "controller": "classic.example.com",
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [allocated_on]}]}
                    ]
                },
            },
            **({"deallocationRequested": True} if deallocation else {}),
        }
    return claim


def service(*objects: dict[str, Any]) -> SchedulingService:
    return SchedulingService(backend=EmbeddedBackend(copy.deepcopy(m.cluster(classic_class(), *objects))))


def test_the_classic_fields_decode() -> None:
    claim = decode_object(classic_claim("c", allocated_on="node-1", deallocation=True))
    assert isinstance(claim, ResourceClaim)
    assert claim.controller == "classic.example.com" and claim.classic and claim.deallocation_requested
    assert claim.allocation is not None and claim.allocation.controller == "classic.example.com"
    cls = decode_object(classic_class())
    assert isinstance(cls, DeviceClass) and cls.suitable_nodes is not None
    # the field exists in v1alpha3 only: a later version's claim never is classic
    later = {**classic_claim("c"), "apiVersion": m.V1}
    later["spec"] = {"controller": "x", "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}}
    assert decode_object(later).controller == ""  # type: ignore[union-attr]


class NoClassicBackend(EmbeddedBackend):
    """A cluster where classic DRA is not driven (the kube backend on a server without it)."""

    @property
    def classic_dra(self) -> str:
        return "classic DRA is switched off (--no-classic-dra)"


async def test_where_classic_dra_is_not_driven_a_classic_claim_is_unschedulable() -> None:
    backend = NoClassicBackend(copy.deepcopy(m.cluster(classic_class(), classic_claim("c1"), m.pod("p1", "c1"))))
    svc = SchedulingService(backend=backend)
    outcome = svc.filter(m.pod("p1", "c1"), NODES)
    assert outcome.node_names == [] and outcome.error.startswith(CLASSIC_NOT_SUPPORTED)
    assert "classic.example.com" in outcome.error and "--no-classic-dra" in outcome.error
    with pytest.raises(PodUnschedulable, match="DRAControlPlaneController"):
        await svc.bind("default", "p1", "uid-p1", "node-1")
    assert not (DebugViews(svc).claim("default", "c1") or {}).get("status")  # nothing allocated, nothing written
    assert len(svc.ledger) == 0


async def test_a_classic_claim_is_never_allocated_with_structured_devices() -> None:
    """GPUs that match the class exist on both nodes; the class's suitableNodes excludes both (no
    ``gpu`` label): the pod is refused everywhere, and bind allocates nothing itself."""
    svc = service(classic_claim("c1"), m.pod("p1", "c1"))
    outcome = svc.filter(m.pod("p1", "c1"), NODES)
    assert outcome.node_names == [] and not outcome.error
    assert outcome.unresolvable == dict.fromkeys(NODES, "excluded by device class node filter")
    with pytest.raises(Transient, match="excluded by device class node filter"):
        await svc.bind("default", "p1", "uid-p1", "node-1")
    assert not (DebugViews(svc).claim("default", "c1") or {}).get("status")
    assert len(svc.ledger) == 0


def test_the_allocator_refuses_a_classic_claim_itself() -> None:
    claim = decode_object(classic_claim("c1"))
    assert isinstance(claim, ResourceClaim)
    slices = [decode_object(m.gpu_slice("node-1", 2))]
    classes = [decode_object(classic_class())]
    with pytest.raises(PodUnschedulable, match=f"claim default/c1: {CLASSIC_NOT_SUPPORTED}"):
        allocate_claims([claim], NodeInfo("node-1"), slices=slices, classes=classes)  # type: ignore[arg-type]


async def test_a_claim_its_driver_allocated_pins_the_pod_and_is_reserved_at_bind() -> None:
    svc = service(classic_claim("c1", allocated_on="node-2"), m.pod("p1", "c1"))
    assert svc.filter(m.pod("p1", "c1"), NODES).node_names == ["node-2"]
    await svc.bind("default", "p1", "uid-p1", "node-2")
    status = DebugViews(svc).claim("default", "c1")["status"]  # type: ignore[index]
    assert status["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]
    assert status["allocation"]["controller"] == "classic.example.com"


def test_a_claim_being_deallocated_by_its_driver_waits() -> None:
    svc = service(classic_claim("c1", allocated_on="node-1", deallocation=True), m.pod("p1", "c1"))
    outcome = svc.filter(m.pod("p1", "c1"), NODES)
    assert outcome.node_names == [] and outcome.error == "resourceclaim must be reallocated"


def scheduling_context(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": ALPHA,
        "kind": "PodSchedulingContext",
        "metadata": {
            "name": "p1",
            "namespace": "default",
            "uid": "ctx-1",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": "uid-p1", "controller": True}],
        },
        "spec": spec,
        "status": {"resourceClaims": [{"name": "gpu", "unsuitableNodes": ["node-2"]}]},
    }


def test_a_pod_scheduling_context_decodes() -> None:
    context = decode_pod_scheduling_context(scheduling_context(selectedNode="node-1", potentialNodes=NODES))
    assert (context.namespace, context.name, context.owner_uid) == ("default", "p1", "uid-p1")
    assert context.selected_node == "node-1" and context.potential_nodes == ("node-1", "node-2")
    assert context.unsuitable_nodes == {"gpu": ("node-2",)}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"potentialNodes": [f"n{i}" for i in range(129)]}, "spec.potentialNodes: must have at most 128 items"),
        ({"potentialNodes": ["n1", "n1"]}, "spec.potentialNodes[1]: Duplicate value: 'n1'"),
        ({"potentialNodes": [""]}, "spec.potentialNodes[0]: required"),
        ({"selectedNode": 5}, "spec.selectedNode: must be a string"),
    ],
)
def test_a_pod_scheduling_context_the_api_server_would_refuse_is_refused(change: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidObject, match=re.escape(message)):
        decode_pod_scheduling_context(scheduling_context(**change))


def test_a_pod_scheduling_context_exists_in_v1alpha3_only() -> None:
    later = {**scheduling_context(), "apiVersion": m.V1}
    with pytest.raises(InvalidObject, match="v1alpha3 only"):
        decode_pod_scheduling_context(later)
    twice = scheduling_context()
    twice["status"]["resourceClaims"].append({"name": "gpu"})
    with pytest.raises(InvalidObject, match="Duplicate value: 'gpu'"):
        decode_pod_scheduling_context(twice)
