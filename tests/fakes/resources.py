"""The API resources the fake serves and the discovery documents that describe them.

A ``ResourceType`` is one collection (``resourceclaims`` in ``resource.k8s.io``); the catalog
lists the ones dra-extender touches. Discovery (``/api``, ``/apis``, ``/apis/<group>``,
``/apis/<group>/<version>``) is built from the catalog and from which resource.k8s.io versions
the fake is configured to serve, so a client's version negotiation meets the same documents a
cluster of that Kubernetes release answers.

A type behind a feature gate (``feature_gate``) exists only when the fake is configured with that
gate on: otherwise discovery leaves it out and its URLs are 404, as on an apiserver whose gate is
off: PodSchedulingContext (resource.k8s.io v1alpha3, Kubernetes 1.31, the gate
``DRAControlPlaneController``, "classic DRA"), DeviceTaintRule (resource.k8s.io v1beta2,
``DRADeviceTaintRules``), and the scheduling.k8s.io v1alpha2 types of Kubernetes 1.36's gang
scheduling, PodGroup (+``status``) and Workload (``GenericWorkload``, with
``--runtime-config=scheduling.k8s.io/v1alpha2=true``; ``podgroups.py`` has their strategy).

A group version exists only while one of its types does: without ``GenericWorkload`` the fake
serves no scheduling.k8s.io at all. With it the group lists v1alpha2 alone, where kube-apiserver
also serves scheduling.k8s.io/v1 (PriorityClasses, not emulated) and names v1 the preferred
version: a client must look for its version in ``versions``, never take ``preferredVersion``.

policy/v1 serves ``poddisruptionbudgets`` (+``status``); the pods' ``eviction`` subresource is
listed under ``/api/v1`` as ``pods/eviction`` (kind Eviction of policy/v1, verb ``create``), as
kube-apiserver lists it (``disruption.py`` has its semantics).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ALL_RESOURCE_VERSIONS",
    "CATALOG",
    "CLASSIC_GATE",
    "FIELD_GETTERS",
    "GENERIC_WORKLOAD_GATE",
    "RESOURCE_GROUP",
    "SCHEDULING_GROUP",
    "TAINT_RULES_GATE",
    "ResourceType",
    "api_group",
    "api_group_list",
    "api_resource_list",
    "api_versions",
    "field_getter",
    "find_resource",
    "is_enabled",
    "is_served",
    "served_groups",
    "shape_family",
    "version_info",
]

RESOURCE_GROUP = "resource.k8s.io"
#: Newest first, the order the apiserver lists versions in (preferred first).
ALL_RESOURCE_VERSIONS = ("v1", "v1beta2", "v1beta1", "v1alpha3")
#: The 1.31 feature gate of classic DRA (control-plane controllers, PodSchedulingContext).
CLASSIC_GATE = "DRAControlPlaneController"
#: DeviceTaintRules (v1beta2; beta and off by default in 1.36).
TAINT_RULES_GATE = "DRADeviceTaintRules"
SCHEDULING_GROUP = "scheduling.k8s.io"
#: Workload and PodGroup (scheduling.k8s.io/v1alpha2; alpha and off by default in 1.36).
GENERIC_WORKLOAD_GATE = "GenericWorkload"

_READ = ("get", "list", "watch")
_WRITE = ("create", "delete", "deletecollection", "patch", "update")
_ALL_VERBS = tuple(sorted(_READ + _WRITE))


@dataclass(frozen=True)
class ResourceType:
    """One served collection.

    ``versions`` are the versions the type exists in; for resource.k8s.io the fake serves only the
    configured subset. ``status`` means a ``/status`` subresource exists: then the main PUT/PATCH
    ignores ``status`` and the subresource takes only ``status`` (as the real strategies reset them).
    ``generation``: ``metadata.generation`` starts at 1 and bumps when ``spec`` changes.
    ``fields``: the field selectors the apiserver accepts beyond ``metadata.name``/``namespace``.
    ``feature_gate``: the type is served only with this gate on (see the module docstring).
    ``unconditional_update``: an update without ``metadata.resourceVersion`` is always taken, even
    by the strict fake (``FakeApiServer.unconditional_updates=False`` refuses it for the other types
    whose strategy allows it). ``conditional_update``: the strategy's ``AllowUnconditionalUpdate``
    is false (Lease, PodDisruptionBudget): such an update is 422 whatever the fake's setting.
    ``apply``: server-side apply is emulated for this type (``apply.py``).
    ``deleted_status``: a DELETE that removes the object answers a Success Status naming it, not
    the object (its storage's ``ReturnDeletedObject`` is false); one that only marks it (finalizers)
    answers the object either way.
    """

    group: str
    versions: tuple[str, ...]
    plural: str
    singular: str
    kind: str
    namespaced: bool
    verbs: tuple[str, ...] = _ALL_VERBS
    status: bool = False
    generation: bool = False
    subresources: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    feature_gate: str = ""
    unconditional_update: bool = False
    conditional_update: bool = False
    apply: bool = False
    deleted_status: bool = False

    @property
    def qualified(self) -> str:
        """``resourceclaims.resource.k8s.io`` (``pods`` for the core group)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    @property
    def all_subresources(self) -> tuple[str, ...]:
        return (("status",) if self.status else ()) + self.subresources


def _dra(
    plural: str,
    singular: str,
    kind: str,
    *,
    namespaced: bool,
    status: bool = False,
    generation: bool = True,
    fields: Sequence[str] = (),
) -> ResourceType:
    return ResourceType(
        group=RESOURCE_GROUP,
        versions=ALL_RESOURCE_VERSIONS,
        plural=plural,
        singular=singular,
        kind=kind,
        namespaced=namespaced,
        status=status,
        generation=generation,
        fields=tuple(fields),
    )


#: ``generation`` as kube-apiserver 1.36's strategies set it: DeviceClass, ResourceSlice, Pod and
#: PodDisruptionBudget have one; ResourceClaim, ResourceClaimTemplate, Node, Namespace, Event,
#: Lease, PodGroup and Workload do not.
CATALOG: tuple[ResourceType, ...] = (
    _dra("deviceclasses", "deviceclass", "DeviceClass", namespaced=False),
    _dra("resourceclaims", "resourceclaim", "ResourceClaim", namespaced=True, status=True, generation=False),
    _dra("resourceclaimtemplates", "resourceclaimtemplate", "ResourceClaimTemplate", namespaced=True, generation=False),
    _dra("resourceslices", "resourceslice", "ResourceSlice", namespaced=False, fields=("spec.nodeName", "spec.driver")),
    # Served in v1beta2 (v1alpha3 too in 1.36, which the fake leaves out), cluster-scoped, with status.
    ResourceType(
        group=RESOURCE_GROUP,
        versions=("v1beta2",),
        plural="devicetaintrules",
        singular="devicetaintrule",
        kind="DeviceTaintRule",
        namespaced=False,
        status=True,
        generation=True,
        feature_gate=TAINT_RULES_GATE,
    ),
    # STR131: status subresource, no generation, unconditional updates allowed; v1alpha3 only.
    ResourceType(
        group=RESOURCE_GROUP,
        versions=("v1alpha3",),
        plural="podschedulingcontexts",
        singular="podschedulingcontext",
        kind="PodSchedulingContext",
        namespaced=True,
        status=True,
        feature_gate=CLASSIC_GATE,
        unconditional_update=True,
        apply=True,
    ),
    # KEP-4671 (1.36): the scheduling.k8s.io/v1alpha2 collections, behind GenericWorkload; neither
    # strategy sets a generation (``podgroups.py``).
    ResourceType(
        group=SCHEDULING_GROUP,
        versions=("v1alpha2",),
        plural="podgroups",
        singular="podgroup",
        kind="PodGroup",
        namespaced=True,
        status=True,
        feature_gate=GENERIC_WORKLOAD_GATE,
        deleted_status=True,
    ),
    ResourceType(
        group=SCHEDULING_GROUP,
        versions=("v1alpha2",),
        plural="workloads",
        singular="workload",
        kind="Workload",
        namespaced=True,
        feature_gate=GENERIC_WORKLOAD_GATE,
        deleted_status=True,
    ),
    ResourceType(
        group="",
        versions=("v1",),
        plural="pods",
        singular="pod",
        kind="Pod",
        namespaced=True,
        status=True,
        generation=True,
        subresources=("binding", "eviction"),
        fields=(
            "spec.nodeName",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.restartPolicy",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ),
        short_names=("po",),
    ),
    ResourceType(
        group="",
        versions=("v1",),
        plural="nodes",
        singular="node",
        kind="Node",
        namespaced=False,
        status=True,
        fields=("spec.unschedulable",),
        short_names=("no",),
    ),
    ResourceType(
        group="",
        versions=("v1",),
        plural="namespaces",
        singular="namespace",
        kind="Namespace",
        namespaced=False,
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
        status=True,
        fields=("status.phase",),
        short_names=("ns",),
    ),
    ResourceType(
        group="",
        versions=("v1",),
        plural="events",
        singular="event",
        kind="Event",
        namespaced=True,
        fields=(
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ),
        short_names=("ev",),
    ),
    ResourceType(
        group="events.k8s.io",
        versions=("v1",),
        plural="events",
        singular="event",
        kind="Event",
        namespaced=True,
        short_names=("ev",),
    ),
    ResourceType(
        group="policy",
        versions=("v1",),
        plural="poddisruptionbudgets",
        singular="poddisruptionbudget",
        kind="PodDisruptionBudget",
        namespaced=True,
        status=True,
        generation=True,
        short_names=("pdb",),
        conditional_update=True,
    ),
    ResourceType(
        group="coordination.k8s.io",
        versions=("v1",),
        plural="leases",
        singular="lease",
        kind="Lease",
        namespaced=True,
        conditional_update=True,
        apply=True,
    ),
    ResourceType(
        group="authorization.k8s.io",
        versions=("v1",),
        plural="selfsubjectaccessreviews",
        singular="selfsubjectaccessreview",
        kind="SelfSubjectAccessReview",
        namespaced=False,
        verbs=("create",),
    ),
)

FieldGetter = Callable[[dict[str, Any]], str]


def _path_getter(path: str) -> FieldGetter:
    parts = path.split(".")

    def get(obj: dict[str, Any]) -> str:
        value: Any = obj
        for part in parts:
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return get


def _event_source(obj: dict[str, Any]) -> str:
    return str((obj.get("source") or {}).get("component") or "")


#: Field selector values by field path; "source" on core events means source.component.
FIELD_GETTERS: dict[str, FieldGetter] = {"source": _event_source}


def field_getter(path: str) -> FieldGetter:
    return FIELD_GETTERS.get(path) or _path_getter(path)


def is_enabled(rt: ResourceType, gates: Collection[str]) -> bool:
    """Whether ``rt`` exists with these feature gates on."""
    return not rt.feature_gate or rt.feature_gate in gates


def find_resource(group: str, plural: str) -> ResourceType | None:
    for rt in CATALOG:
        if rt.group == group and rt.plural == plural:
            return rt
    return None


def shape_family(group: str, version: str) -> str:
    """Versions whose JSON shapes are identical share a family, so an object stored in one may be
    served in another by rewriting ``apiVersion`` only: resource.k8s.io v1 is v1beta2 promoted.
    v1beta1 and v1alpha3 differ (flat ``deviceClassName``, ``basic`` devices) and get their own."""
    if group == RESOURCE_GROUP and version in ("v1", "v1beta2"):
        return "v1"
    return version


# --- discovery documents ------------------------------------------------------------------------


def served_groups(resource_versions: Sequence[str], gates: Collection[str] = ()) -> list[tuple[str, tuple[str, ...]]]:
    """(group, served versions newest first) for every non-core group, resource.k8s.io configured.
    A group version is served while one of its types exists (``is_enabled`` with ``gates``), as
    kube-apiserver skips a group version left without resources."""
    groups: dict[str, list[str]] = {}
    for rt in CATALOG:
        if not rt.group or not is_enabled(rt, gates):
            continue
        versions = [v for v in rt.versions if rt.group != RESOURCE_GROUP or v in resource_versions]
        entry = groups.setdefault(rt.group, [])
        entry.extend(v for v in versions if v not in entry)
    return [(group, tuple(versions)) for group, versions in groups.items() if versions]


def is_served(group: str, version: str, resource_versions: Sequence[str], gates: Collection[str] = ()) -> bool:
    if not group:
        return version == "v1"
    return any(g == group and version in versions for g, versions in served_groups(resource_versions, gates))


def api_versions() -> dict[str, Any]:
    """``GET /api``."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}],
    }


def _group_entry(group: str, versions: Iterable[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": listed, "preferredVersion": listed[0]}


def api_group_list(resource_versions: Sequence[str], gates: Collection[str] = ()) -> dict[str, Any]:
    """``GET /apis``."""
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_entry(g, vs) for g, vs in served_groups(resource_versions, gates)],
    }


def api_group(group: str, resource_versions: Sequence[str], gates: Collection[str] = ()) -> dict[str, Any] | None:
    """``GET /apis/<group>``, or None when the group is not served."""
    for name, versions in served_groups(resource_versions, gates):
        if name == group:
            return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(name, versions)}
    return None


def api_resource_list(group: str, version: str, gates: Collection[str] = ()) -> dict[str, Any]:
    """``GET /api/v1`` or ``/apis/<group>/<version>`` (call only for served group versions);
    types behind a feature gate that is not in ``gates`` are left out."""
    resources: list[dict[str, Any]] = []
    for rt in CATALOG:
        if rt.group != group or version not in rt.versions or not is_enabled(rt, gates):
            continue
        entry: dict[str, Any] = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": list(rt.verbs),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        resources.append(entry)
        for sub in rt.all_subresources:
            entry = {"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced}
            entry.update(_SUBRESOURCE_ENTRIES.get(sub, {"kind": rt.kind, "verbs": ["get", "patch", "update"]}))
            resources.append(entry)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


#: Discovery fields of the subresources that are not ``status`` (kinds of another group name it).
_SUBRESOURCE_ENTRIES: dict[str, dict[str, Any]] = {
    "binding": {"kind": "Binding", "verbs": ["create"]},
    "eviction": {"group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]},
}


def version_info(minor: int) -> dict[str, Any]:
    """``GET /version``."""
    return {
        "major": "1",
        "minor": str(minor),
        "gitVersion": f"v1.{minor}.0",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }
