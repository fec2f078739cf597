"""The core's model of a PodGroup (``scheduling.k8s.io``: v1alpha2 in Kubernetes 1.36, v1beta1 in
1.37; spec/workloads-and-gangs.md §2): what gang planning reads of one, decoded once at ingest by
``extender.core.convert`` like every other object.

A PodGroup with a ``gang`` scheduling policy is a gang: kube-scheduler places none of its pods
until ``min_count`` of them can be placed in one group cycle. One with the ``basic`` policy (or
none) groups pods without that barrier; its PodGroup-level claims still apply to every member.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "GANG_TOPOLOGY_ANNOTATION",
    "POD_GROUP_CONSUMER",
    "PodGroup",
    "PodGroupClaim",
]

#: Where a gang asks to be placed within one domain of a node label when the API server drops
#: ``spec.schedulingConstraints`` (TopologyAwareWorkloadScheduling off): our extension.
GANG_TOPOLOGY_ANNOTATION = "dra-extender.io/gang-topology-key"
#: ``(apiGroup, resource)`` of a ResourceClaim reservation that names a PodGroup.
POD_GROUP_CONSUMER = ("scheduling.k8s.io", "podgroups")


@dataclass(frozen=True, slots=True)
class PodGroupClaim:
    """One ``spec.resourceClaims[]`` entry: a claim shared by every member of the group."""

    name: str
    #: ``resourceClaimName`` (None for a template claim).
    claim_name: str | None = None
    #: ``resourceClaimTemplateName`` (None for a named claim).
    template_name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PodGroup:
    namespace: str
    name: str
    uid: str
    #: The ``apiVersion`` it was read in (``scheduling.k8s.io/v1alpha2``, ...).
    api_version: str = ""
    resource_version: str = ""
    #: ``schedulingPolicy.gang.minCount``; None for the ``basic`` policy (no gang barrier).
    min_count: int | None = None
    #: The node label whose one value every member's node must share: ``schedulingConstraints
    #: .topology[0].key``, else ``GANG_TOPOLOGY_ANNOTATION`` ("" when neither).
    topology_key: str = ""
    #: Where ``topology_key`` came from: "constraints", "annotation" or "".
    topology_source: str = ""
    claims: tuple[PodGroupClaim, ...] = ()
    #: ``status.resourceClaimStatuses``: claim entry name -> the claim made for the group (None:
    #: the controller decided to make none).
    claim_statuses: tuple[tuple[str, str | None], ...] = ()
    #: ``disruptionMode: PodGroup`` (v1alpha2) or ``all`` (v1beta1): all members are evicted
    #: together or none is.
    disruption_all: bool = False
    priority_class_name: str = ""
    #: ``spec.priority`` (None: the members' own priorities count).
    priority: int | None = None
    #: ``podGroupTemplateRef.workload.workloadName`` (v1beta1 ``workloadRef.workloadName``).
    workload: str = ""
    deleting: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gang(self) -> bool:
        """Whether kube-scheduler holds its members until ``min_count`` of them fit."""
        return self.min_count is not None

    def claim_status(self, entry: str) -> str | None:
        """The name of the claim made for the group's claim entry ``entry``; None when there is no
        status for it yet (or the controller made none)."""
        for name, claim in self.claim_statuses:
            if name == entry:
                return claim
        return None
