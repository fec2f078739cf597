"""Which resource.k8s.io version the server serves, with clear errors when it cannot be used.

We speak v1, v1beta2, v1beta1 and v1alpha3 (``convert.py`` decodes each), in that order of
preference, whatever the server's own ``preferredVersion`` says: v1 is what upstream's scheduler
uses when it is served. The parsing is pure (``pick_version``, ``missing_resources``) so it is
tested with canned discovery documents; ``discover`` does the GETs and takes the first
preferred version that has every resource we use (new servers keep v1alpha3 for other kinds).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from extender.core.errors import ApiUnavailable, ObjectNotFound

from .client import KubeClient
from .errors import ApiNotServed, ServerUnreachable

__all__ = [
    "CLASSIC_RESOURCES",
    "CLASSIC_VERSION",
    "GROUP",
    "POD_GROUP_VERSIONS",
    "PREFERRED_VERSIONS",
    "REQUIRED_RESOURCES",
    "SCHEDULING_GROUP",
    "TAINT_RULE_VERSION",
    "classic_problem",
    "discover",
    "discover_classic",
    "discover_pod_groups",
    "missing_resources",
    "pick_version",
    "serves_taint_rules",
]

GROUP = "resource.k8s.io"
PREFERRED_VERSIONS = ("v1", "v1beta2", "v1beta1", "v1alpha3")
#: What the backend lists, watches and writes in the group.
REQUIRED_RESOURCES = ("resourceslices", "resourceclaims", "resourceclaims/status", "deviceclasses")
#: Classic DRA (Kubernetes 1.26-1.31): served in v1alpha3 only, and in 1.31 only with the
#: DRAControlPlaneController feature gate on.
CLASSIC_VERSION = "v1alpha3"
CLASSIC_RESOURCES = ("podschedulingcontexts", "podschedulingcontexts/status")
#: DeviceTaintRules (KEP-5055): kube-scheduler 1.36 watches them in v1beta2 only (off by default:
#: the DRADeviceTaintRules gate and ``--runtime-config=resource.k8s.io/v1beta2=true``).
TAINT_RULE_VERSION = "v1beta2"
#: PodGroups (KEP-4671, gate GenericWorkload): v1alpha2 in 1.36, v1beta1 (and v1alpha3) in 1.37; the
#: newest served wins.
SCHEDULING_GROUP = "scheduling.k8s.io"
POD_GROUP_VERSIONS = ("v1beta1", "v1alpha3", "v1alpha2")
_GATE = "Kubernetes 1.31 with the DRAControlPlaneController feature gate on the API server, controller-manager"


def classic_problem(version: str, resource_list: Mapping[str, Any] | None) -> str:
    """Why classic DRA cannot be driven with the chosen version and its resource list ("" if it
    can): pure, for canned discovery documents."""
    if version != CLASSIC_VERSION:
        return (
            f"the API server is used through {GROUP}/{version}; classic DRA exists in {GROUP}/{CLASSIC_VERSION} "
            f"only ({_GATE})"
        )
    missing = missing_resources(resource_list or {}, CLASSIC_RESOURCES)
    if missing:
        return f"{GROUP}/{CLASSIC_VERSION} does not serve {', '.join(missing)} (it needs {_GATE})"
    return ""


async def discover_classic(client: KubeClient, version: str) -> str:
    """``classic_problem`` for the server: one discovery GET when ``version`` is v1alpha3."""
    if version != CLASSIC_VERSION:
        return classic_problem(version, None)
    path = f"/apis/{GROUP}/{version}"
    return classic_problem(version, await client.request("GET", path, verb="get", resource=path))


async def serves_taint_rules(client: KubeClient) -> bool:
    """Whether the server serves DeviceTaintRules in v1beta2 (one discovery GET; a version not
    served at all answers 404)."""
    path = f"/apis/{GROUP}/{TAINT_RULE_VERSION}"
    try:
        resource_list = await client.request("GET", path, verb="get", resource=path)
    except ObjectNotFound:
        return False
    except ApiUnavailable:  # an aggregated discovery hiccup: without the rules, as before 1.36
        return False
    return not missing_resources(resource_list or {}, ("devicetaintrules",))


async def discover_pod_groups(client: KubeClient) -> str:
    """The scheduling.k8s.io version that serves ``podgroups`` ("v1alpha2", ...), or "" where none
    does (the GenericWorkload gate is off, or the alpha/beta version is not enabled with
    ``--runtime-config``). A discovery hiccup reads as not served: gangs are then scheduled as
    ungrouped pods, as before 1.36."""
    try:
        group = await client.request(
            "GET", f"/apis/{SCHEDULING_GROUP}", verb="get", resource=f"/apis/{SCHEDULING_GROUP}"
        )
    except (ObjectNotFound, ApiUnavailable):
        return ""
    served = {str(v.get("version")) for v in (group or {}).get("versions") or () if isinstance(v, dict)}
    for version in POD_GROUP_VERSIONS:
        if version not in served:
            continue
        path = f"/apis/{SCHEDULING_GROUP}/{version}"
        try:
            resource_list = await client.request("GET", path, verb="get", resource=path)
        except (ObjectNotFound, ApiUnavailable):
            continue
        if not missing_resources(resource_list or {}, ("podgroups",)):
            return version
    return ""


def pick_version(group: Mapping[str, Any]) -> str:
    """The best version we speak among those an ``APIGroup`` document lists; ApiNotServed if none."""
    served = [str(v.get("version")) for v in group.get("versions") or () if isinstance(v, dict)]
    for version in PREFERRED_VERSIONS:
        if version in served:
            return version
    raise ApiNotServed(
        f"the API server serves {GROUP} only in versions {', '.join(served) or '(none)'}; "
        f"dra-extender needs one of {', '.join(PREFERRED_VERSIONS)}"
    )


def missing_resources(resource_list: Mapping[str, Any], required: Iterable[str] = REQUIRED_RESOURCES) -> list[str]:
    """The required resources (and subresources) an ``APIResourceList`` document lacks."""
    names = {str(r.get("name")) for r in resource_list.get("resources") or () if isinstance(r, dict)}
    return [name for name in required if name not in names]


async def discover(client: KubeClient) -> str:
    """The resource.k8s.io version to use (``"v1"``, ...). Raises ServerUnreachable when the
    server does not answer, ApiNotServed when the group or one of our resources is not served."""
    where = client.config.host
    try:
        await client.request("GET", "/version", verb="get", resource="/version")
    except ApiUnavailable as exc:
        raise ServerUnreachable(
            f"cannot reach the API server at {where} ({client.config.source}): {exc.reason}"
        ) from exc
    try:
        group = await client.request("GET", f"/apis/{GROUP}", verb="get", resource=f"/apis/{GROUP}")
    except ObjectNotFound as exc:
        raise ApiNotServed(
            f"the API server at {where} does not serve {GROUP} (DRA is not enabled: it needs "
            "Kubernetes 1.34+, or the DynamicResourceAllocation feature gate and the API group enabled)"
        ) from exc
    pick_version(group)  # raises when none of ours is served
    served = {str(v.get("version")) for v in group.get("versions") or () if isinstance(v, dict)}
    lacking: list[str] = []
    for version in (v for v in PREFERRED_VERSIONS if v in served):
        path = f"/apis/{GROUP}/{version}"
        missing = missing_resources(await client.request("GET", path, verb="get", resource=path))
        if not missing:
            return version
        lacking.append(f"{GROUP}/{version} lacks {', '.join(missing)}")
    raise ApiNotServed(f"no served version of {GROUP} on {where} has what dra-extender needs: {'; '.join(lacking)}")
