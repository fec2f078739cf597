"""The defaulting the fake applies to a written body before validating it, as the apiserver's decoder
does (``SetDefaults_*``), for the kinds whose defaults clients meet.

- ResourceClaim (and a ResourceClaimTemplate's ``spec.spec``): every exact request and every
  subrequest gets ``allocationMode: ExactCount`` when it has none, and ``count: 1`` when its mode is
  ExactCount and it has no count (or 0); device tolerations get ``operator: Equal``. In v1beta1 and
  v1alpha3 the request itself is the exact request (unless it has ``firstAvailable``). A
  template's ``spec.metadata`` is ``{}`` when absent (ObjectMeta is a struct: always written).
- scheduling.k8s.io PodGroup: ``status: {}``, ``spec.podGroupTemplateRef: null`` and
  ``spec.disruptionMode: Pod`` when absent; Workload: each template's ``schedulingConstraints:
  null`` (``podgroups.py``).
- core/v1 Event: ``source: {}``, ``firstTimestamp``, ``lastTimestamp`` and ``eventTime`` null,
  ``reportingComponent`` and ``reportingInstance`` "" when absent (Go zero values, written by the
  apiserver's JSON); events.k8s.io/v1 Event: ``deprecatedSource: {}``,
  ``deprecatedFirstTimestamp`` and ``deprecatedLastTimestamp`` null.

Not emulated (see the fake's docstring): the defaults and admission plugins of pods (restartPolicy,
dnsPolicy, schedulerName, tolerations, the service account token volume, ...) and of nodes (the
``not-ready`` taint, ``nodeInfo``).
"""

from __future__ import annotations

from typing import Any

from .podgroups import default as default_scheduling
from .resources import RESOURCE_GROUP, SCHEDULING_GROUP, ResourceType

__all__ = ["apply_defaults"]


def _exact(request: dict[str, Any]) -> None:
    if not request.get("allocationMode"):
        request["allocationMode"] = "ExactCount"
    if request["allocationMode"] == "ExactCount" and not request.get("count"):
        request["count"] = 1
    for toleration in request.get("tolerations") or ():
        if isinstance(toleration, dict) and not toleration.get("operator"):
            toleration["operator"] = "Equal"


def _claim_spec(spec: Any, version: str) -> None:
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    for request in requests if isinstance(requests, list) else ():
        if not isinstance(request, dict):
            continue
        subrequests = request.get("firstAvailable")
        for sub in subrequests if isinstance(subrequests, list) else ():
            if isinstance(sub, dict):
                _exact(sub)
        if version in ("v1beta1", "v1alpha3"):
            if not subrequests:
                _exact(request)
        elif isinstance(request.get("exactly"), dict):
            _exact(request["exactly"])


def apply_defaults(rt: ResourceType, version: str, obj: dict[str, Any]) -> None:
    """Default ``obj`` (a decoded body of ``rt`` in ``version``) in place."""
    if rt.group == RESOURCE_GROUP and rt.kind == "ResourceClaim":
        _claim_spec(obj.get("spec"), version)
    elif rt.group == RESOURCE_GROUP and rt.kind == "ResourceClaimTemplate":
        spec = obj.get("spec")
        if isinstance(spec, dict):
            if spec.get("metadata") is None:
                spec["metadata"] = {}
            _claim_spec(spec.get("spec"), version)
    elif rt.kind == "Event" and rt.group == "":
        obj.setdefault("source", {})
        for name in ("firstTimestamp", "lastTimestamp", "eventTime"):
            obj.setdefault(name, None)
        for name in ("reportingComponent", "reportingInstance"):
            obj.setdefault(name, "")
    elif rt.group == SCHEDULING_GROUP:
        default_scheduling(rt.kind, obj)
    elif rt.kind == "Event" and rt.group == "events.k8s.io":
        obj.setdefault("deprecatedSource", {})
        for name in ("deprecatedFirstTimestamp", "deprecatedLastTimestamp"):
            obj.setdefault(name, None)
