"""PodGroups and Workloads (scheduling.k8s.io/v1alpha2, KEP-4671) as kube-apiserver v1.36.3 serves
them with the gates of the gang experiments (``shared/spec/workloads-and-gangs.md`` §0.2):
GenericWorkload, GangScheduling and DRAWorkloadResourceClaims on, TopologyAwareWorkloadScheduling
and WorkloadAwarePreemption off, ``--runtime-config=scheduling.k8s.io/v1alpha2=true``. That is what
``FakeApiServer(gangs=True)`` stands for; without it neither collection exists (``resources.py``).

Stored shape, as the decoder and the strategies write it: a PodGroup's ``spec.podGroupTemplateRef``
is ``null`` when unset (the field has no ``omitempty``), ``spec.disruptionMode`` is ``Pod``, and
``status`` is always there (``{}`` when empty; a condition's ``message`` is ``""`` when unset); a
Workload template's ``schedulingConstraints`` is ``null`` when unset; an empty ``resourceClaims``
list is left out. Neither kind has ``metadata.generation``. A DELETE that removes one answers a
Success Status naming it, not the object. Updates follow the generic rules (``registry.py``);
a PodGroup's ``/status`` write takes only the status.

Admission: ``PodGroupProtection`` appends the finalizer ``scheduling.k8s.io/podgroup-protection``
to every PodGroup created through the API (once; one the body already lists stays where it is), so
a DELETE only marks the group (``deletionTimestamp``) until the finalizer is removed: that is
kube-controller-manager's ``podgroupprotection`` controller's job once no member pod is active, and
none runs here (a test removes it; ``put_object`` writes skip admission). After validation, a
PodGroup whose ``spec.podGroupTemplateRef`` names a Workload absent from its namespace, or a
template that Workload lacks, is refused: 403 ``PodGroup rejected: Workload "W" not found`` /
``PodGroupTemplate "T" not found in Workload "W"``.

Gated fields are dropped silently from a write unless the stored object already uses them
(``dropDisabledPodGroupFields``): ``schedulingConstraints`` (TopologyAwareWorkloadScheduling),
``priorityClassName`` and ``priority`` (WorkloadAwarePreemption), and ``disruptionMode``, which then
reads back ``Pod``. Every stored PodGroup uses ``disruptionMode``, so an update changing it is 422
``spec.disruptionMode: Forbidden`` (so is changing a gated field a stored group uses). The same
fields of a Workload's templates are dropped the same way (there ``disruptionMode`` stays unset).

Validation (declarative in 1.36; paths and words as it answers; metadata as for every kind):

- PodGroup: exactly one of ``schedulingPolicy.basic`` / ``gang`` (``Invalid value: "": must specify
  one of: `basic`, `gang``` / ``Invalid value: "{basic, gang}": must specify exactly one of: ...``),
  ``gang.minCount`` required (0 counts as unset) and at least 1; at most 4 ``resourceClaims``
  (``Too many: N: must have at most 4 items``), unique by ``name`` (``Duplicate value:`` the entry),
  each with a ``name`` (a DNS label) and exactly one of ``resourceClaimName`` /
  ``resourceClaimTemplateName`` (DNS subdomains); a set ``podGroupTemplateRef.workload`` needs
  ``workloadName`` and ``podGroupTemplateName``. On update every spec field is immutable
  (``spec.<field>: Invalid value: null: field is immutable``, one error per changed field, and a
  changed field's content is not checked further). Status writes: conditions as
  ``metav1.Condition`` (a qualified-name ``type``, unique; ``status`` True/False/Unknown;
  ``lastTransitionTime`` and ``reason`` required, the reason's pattern), and every
  ``resourceClaimStatuses[].name`` must name an entry of ``spec.resourceClaims`` (at most 4,
  unique, a DNS subdomain ``resourceClaimName``).
- Workload: ``podGroupTemplates`` required, at most 8, unique by name, each a DNS-label ``name``
  with a scheduling policy and resource claims checked as a PodGroup's; ``controllerRef`` needs
  ``kind`` and ``name`` (a set ``apiGroup`` a DNS subdomain). On update ``controllerRef`` and
  ``podGroupTemplates`` are immutable.

Not emulated: unknown fields are kept (the real decoder drops them), the formats of
``podGroupTemplateRef`` and ``controllerRef`` names, field length limits.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

from .status import FieldError
from .validation import dns_label_errors, qualified_name_problems, subdomain_errors

__all__ = [
    "MAX_POD_GROUP_CLAIMS",
    "MAX_POD_GROUP_TEMPLATES",
    "PROTECTION_FINALIZER",
    "admit_pod_group",
    "check_pod_group",
    "check_pod_group_status",
    "check_pod_group_update",
    "check_workload",
    "check_workload_update",
    "default",
    "drop_disabled_fields",
    "normalise_status",
    "template_ref_problem",
]

#: The finalizer the PodGroupProtection admission plugin adds (``scheduling.PodGroupProtectionFinalizer``).
PROTECTION_FINALIZER = "scheduling.k8s.io/podgroup-protection"
#: ``+k8s:maxItems`` of ``PodGroupSpec.resourceClaims`` (and ``status.resourceClaimStatuses``).
MAX_POD_GROUP_CLAIMS = 4
#: ``+k8s:maxItems`` of ``WorkloadSpec.podGroupTemplates``.
MAX_POD_GROUP_TEMPLATES = 8
#: The PodGroup spec fields in the order upstream validates them.
SPEC_FIELDS = (
    "podGroupTemplateRef",
    "schedulingPolicy",
    "schedulingConstraints",
    "resourceClaims",
    "disruptionMode",
    "priorityClassName",
    "priority",
)
#: Spec fields behind a gate that is off (TopologyAwareWorkloadScheduling, WorkloadAwarePreemption).
GATED_FIELDS = ("schedulingConstraints", "disruptionMode", "priorityClassName", "priority")
DEFAULT_DISRUPTION_MODE = "Pod"
CONDITION_STATUSES = ("False", "True", "Unknown")
#: ``metav1.Condition`` limits.
MAX_REASON = 1024
MAX_MESSAGE = 32768
_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_REASON_HELP = (
    "a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric "
    "characters or '_,:', and must end with an alphanumeric character or '_' (e.g. 'my_name',  or 'MY_NAME',  "
    "or 'MyName',  or 'ReasonA,ReasonB',  or 'ReasonA:ReasonB', regex used for validation is "
    "'[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')"
)
_IMMUTABLE = "Invalid value: null: field is immutable"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    return _dict(obj.get("spec"))


# --- decoding, admission, strategy -------------------------------------------------------------


def default(kind: str, obj: dict[str, Any]) -> None:
    """The decoder's part of the stored shape (see the module docstring), in place."""
    if not isinstance(obj.get("spec"), dict):
        obj["spec"] = {}
    spec = obj["spec"]
    if kind == "PodGroup":
        if not isinstance(obj.get("status"), dict):
            obj["status"] = {}
        spec.setdefault("podGroupTemplateRef", None)
        if not spec.get("disruptionMode"):
            spec["disruptionMode"] = DEFAULT_DISRUPTION_MODE
        if spec.get("resourceClaims") == []:
            del spec["resourceClaims"]
    elif kind == "Workload":
        for template in spec.get("podGroupTemplates") or ():
            if isinstance(template, dict):
                template.setdefault("schedulingConstraints", None)
                if template.get("resourceClaims") == []:
                    del template["resourceClaims"]


def admit_pod_group(obj: dict[str, Any]) -> None:
    """PodGroupProtection on create: append the protection finalizer unless it is there."""
    meta = obj.setdefault("metadata", {})
    finalizers = meta.get("finalizers")
    finalizers = list(finalizers) if isinstance(finalizers, list) else []
    if PROTECTION_FINALIZER not in finalizers:
        meta["finalizers"] = [*finalizers, PROTECTION_FINALIZER]


def drop_disabled_fields(kind: str, new: dict[str, Any], old: dict[str, Any] | None, *, parts: str = "") -> None:
    """Clear, in place, the gated spec fields of a PodGroup write (or of a Workload's templates)
    that ``old`` (None on create) does not use; a PodGroup's ``disruptionMode`` then reads ``Pod``.
    Status writes (``parts == "status"``) keep the stored spec, so they have nothing to drop."""
    spec = new.get("spec")
    if parts == "status" or not isinstance(spec, dict):
        return
    old_spec = _spec(old) if old is not None else {}
    if kind == "Workload":
        _drop_template_fields(spec, old_spec)
        return
    for field in GATED_FIELDS:
        if old_spec.get(field) in (None, "") and field in spec:
            del spec[field]
    if not spec.get("disruptionMode"):
        spec["disruptionMode"] = DEFAULT_DISRUPTION_MODE


def _drop_template_fields(spec: dict[str, Any], old_spec: dict[str, Any]) -> None:
    """A Workload's templates lose the gated fields no stored template uses (an unset
    ``schedulingConstraints`` reads ``null``; ``disruptionMode`` gets no default there)."""
    new_templates = [t for t in spec.get("podGroupTemplates") or () if isinstance(t, dict)]
    old_templates = [t for t in old_spec.get("podGroupTemplates") or () if isinstance(t, dict)]
    for field in GATED_FIELDS:
        if any(t.get(field) not in (None, "") for t in old_templates):
            continue
        for template in new_templates:
            if field == "schedulingConstraints":
                template[field] = None
            else:
                template.pop(field, None)


def normalise_status(status: dict[str, Any]) -> None:
    """A written PodGroup status as stored: empty lists left out, a condition's unset message ""."""
    for field in ("conditions", "resourceClaimStatuses"):
        if status.get(field) in (None, []):
            status.pop(field, None)
    for condition in status.get("conditions") or ():
        if isinstance(condition, dict):
            condition.setdefault("message", "")


def template_ref_problem(obj: dict[str, Any], workload: Callable[[str], dict[str, Any] | None]) -> str:
    """Why the admission plugin refuses a new PodGroup's ``podGroupTemplateRef`` ("" if it does
    not): ``workload(name)`` is the Workload of the group's namespace or None."""
    ref = _dict(_dict(_spec(obj).get("podGroupTemplateRef")).get("workload"))
    name, template = ref.get("workloadName"), ref.get("podGroupTemplateName")
    if not name:
        return ""
    found = workload(str(name))
    if found is None:
        return f'PodGroup rejected: Workload "{name}" not found'
    templates = _spec(found).get("podGroupTemplates") or ()
    if not any(isinstance(t, dict) and t.get("name") == template for t in templates):
        return f'PodGroup rejected: PodGroupTemplate "{template}" not found in Workload "{name}"'
    return ""


# --- validation ----------------------------------------------------------------------------------


def _union(value: dict[str, Any], members: tuple[str, ...], path: str) -> list[FieldError]:
    """``validate.Union``: exactly one member set."""
    listed = ", ".join(f"`{m}`" for m in members)
    chosen = [m for m in members if value.get(m) is not None]
    if not chosen:
        return [FieldError(path, "FieldValueInvalid", f'Invalid value: "": must specify one of: {listed}')]
    if len(chosen) > 1:
        shown = "{" + ", ".join(chosen) + "}"
        return [
            FieldError(path, "FieldValueInvalid", f'Invalid value: "{shown}": must specify exactly one of: {listed}')
        ]
    return []


def _policy_errors(policy: Any, path: str) -> list[FieldError]:
    """A scheduling policy: the basic/gang union, then the gang's ``minCount``."""
    policy = _dict(policy)
    errors = _union(policy, ("basic", "gang"), path)
    gang = policy.get("gang")
    if isinstance(gang, dict):
        count = gang.get("minCount")
        if count in (None, 0):
            errors.append(FieldError(f"{path}.gang.minCount", "FieldValueRequired", "Required value"))
        elif isinstance(count, int) and count < 1:
            errors.append(
                FieldError(
                    f"{path}.gang.minCount",
                    "FieldValueInvalid",
                    f"Invalid value: {count}: must be greater than or equal to 1",
                )
            )
    return errors


def _duplicate(item: dict[str, Any], first: tuple[str, ...]) -> str:
    """An entry as ``Duplicate value:`` prints it: its Go struct as JSON, fields in their order."""
    ordered = {k: item[k] for k in first if k in item} | {k: v for k, v in item.items() if k not in first}
    return orjson.dumps(ordered).decode()


def _unique(items: list[Any], path: str, first: tuple[str, ...]) -> list[FieldError]:
    """``validate.Unique`` of a list map keyed by ``name``: each repeat is reported on itself."""
    errors: list[FieldError] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        name = str(item.get("name") or "")
        if name in seen:
            errors.append(
                FieldError(f"{path}[{index}]", "FieldValueDuplicate", f"Duplicate value: {_duplicate(item, first)}")
            )
        seen.add(name)
    return errors


def _claims_errors(claims: Any, path: str) -> list[FieldError]:
    """``resourceClaims`` of a PodGroup or a template."""
    if not isinstance(claims, list) or not claims:
        return []
    if len(claims) > MAX_POD_GROUP_CLAIMS:
        detail = f"Too many: {len(claims)}: must have at most {MAX_POD_GROUP_CLAIMS} items"
        return [FieldError(path, "FieldValueTooMany", detail)]
    errors = _unique(claims, path, ("name", "resourceClaimName", "resourceClaimTemplateName"))
    for index, claim in enumerate(claims):
        if not isinstance(claim, dict):
            continue
        cpath = f"{path}[{index}]"
        errors += _union(claim, ("resourceClaimName", "resourceClaimTemplateName"), cpath)
        errors += dns_label_errors(claim.get("name"), f"{cpath}.name")
        for field in ("resourceClaimName", "resourceClaimTemplateName"):
            if isinstance(claim.get(field), str):
                errors += subdomain_errors(claim[field], f"{cpath}.{field}")
    return errors


def _template_ref_errors(ref: Any, path: str) -> list[FieldError]:
    workload = _dict(ref).get("workload")
    if not isinstance(workload, dict):
        return []
    return [
        FieldError(f"{path}.workload.{field}", "FieldValueRequired", "Required value")
        for field in ("workloadName", "podGroupTemplateName")
        if not workload.get(field)
    ]


def check_pod_group(obj: dict[str, Any]) -> list[FieldError]:
    """A new PodGroup's spec (after the gated fields were dropped)."""
    spec = _spec(obj)
    return (
        _template_ref_errors(spec.get("podGroupTemplateRef"), "spec.podGroupTemplateRef")
        + _policy_errors(spec.get("schedulingPolicy"), "spec.schedulingPolicy")
        + _claims_errors(spec.get("resourceClaims"), "spec.resourceClaims")
    )


def check_pod_group_update(old: dict[str, Any], new: dict[str, Any]) -> list[FieldError]:
    """A main-resource write: each changed spec field is immutable (a gated one Forbidden)."""
    old_spec, new_spec = _spec(old), _spec(new)
    errors: list[FieldError] = []
    for field in SPEC_FIELDS:
        if old_spec.get(field) == new_spec.get(field):
            continue
        if field not in GATED_FIELDS:
            errors.append(FieldError(f"spec.{field}", "FieldValueInvalid", _IMMUTABLE))
        elif new_spec.get(field) not in (None, ""):
            errors.append(FieldError(f"spec.{field}", "FieldValueForbidden", "Forbidden"))
    return errors


def _condition_errors(conditions: Any, path: str) -> list[FieldError]:
    """``metav1validation.ValidateConditions`` as 1.36 words it."""
    if not isinstance(conditions, list):
        return []
    errors: list[FieldError] = []
    types: set[str] = set()
    for index, condition in enumerate(conditions):
        if not isinstance(condition, dict):
            continue
        cpath = f"{path}[{index}]"
        kind = str(condition.get("type") or "")
        if kind in types:
            errors.append(FieldError(f"{cpath}.type", "FieldValueDuplicate", f'Duplicate value: "{kind}"'))
        types.add(kind)
        for problem in qualified_name_problems(kind):
            errors.append(FieldError(f"{cpath}.type", "FieldValueInvalid", f'Invalid value: "{kind}": {problem}'))
        status = condition.get("status")
        if status not in CONDITION_STATUSES:
            supported = ", ".join(f'"{s}"' for s in CONDITION_STATUSES)
            errors.append(
                FieldError(
                    f"{cpath}.status",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{status or ""}": supported values: {supported}',
                )
            )
        generation = condition.get("observedGeneration")
        if isinstance(generation, int) and generation < 0:
            errors.append(
                FieldError(
                    f"{cpath}.observedGeneration",
                    "FieldValueInvalid",
                    f"Invalid value: {generation}: must be greater than or equal to zero",
                )
            )
        if not condition.get("lastTransitionTime"):
            errors.append(FieldError(f"{cpath}.lastTransitionTime", "FieldValueRequired", "Required value"))
        reason = str(condition.get("reason") or "")
        if not reason:
            errors.append(FieldError(f"{cpath}.reason", "FieldValueRequired", "Required value"))
        else:
            if not _REASON.match(reason):
                errors.append(
                    FieldError(f"{cpath}.reason", "FieldValueInvalid", f'Invalid value: "{reason}": {_REASON_HELP}')
                )
            if len(reason) > MAX_REASON:
                detail = f"Too long: may not be more than {MAX_REASON} bytes"
                errors.append(FieldError(f"{cpath}.reason", "FieldValueTooLong", detail))
        if len(str(condition.get("message") or "")) > MAX_MESSAGE:
            detail = f"Too long: may not be more than {MAX_MESSAGE} bytes"
            errors.append(FieldError(f"{cpath}.message", "FieldValueTooLong", detail))
    return errors


def check_pod_group_status(obj: dict[str, Any]) -> list[FieldError]:
    """A ``/status`` write (the stored spec, the written status)."""
    status = _dict(obj.get("status"))
    path = "status.resourceClaimStatuses"
    errors = _condition_errors(status.get("conditions"), "status.conditions")
    statuses = status.get("resourceClaimStatuses")
    if not isinstance(statuses, list) or not statuses:
        return errors
    names = {str(c.get("name")) for c in _spec(obj).get("resourceClaims") or () if isinstance(c, dict)}
    for index, entry in enumerate(statuses):
        name = _dict(entry).get("name")
        if name not in names:
            errors.append(
                FieldError(
                    f"{path}[{index}].name",
                    "FieldValueInvalid",
                    f'Invalid value: "{name or ""}": must match the name of an entry in `spec.resourceClaims`',
                )
            )
    if len(statuses) > MAX_POD_GROUP_CLAIMS:
        detail = f"Too many: {len(statuses)}: must have at most {MAX_POD_GROUP_CLAIMS} items"
        return [*errors, FieldError(path, "FieldValueTooMany", detail)]
    errors += _unique(statuses, path, ("name", "resourceClaimName"))
    for index, entry in enumerate(statuses):
        claim = _dict(entry).get("resourceClaimName")
        if isinstance(claim, str):
            errors += subdomain_errors(claim, f"{path}[{index}].resourceClaimName")
    return errors


def _controller_ref_errors(ref: Any, path: str) -> list[FieldError]:
    if not isinstance(ref, dict):
        return []
    errors: list[FieldError] = []
    if ref.get("apiGroup"):
        errors += subdomain_errors(str(ref["apiGroup"]), f"{path}.apiGroup")
    for field in ("kind", "name"):
        if not ref.get(field):
            errors.append(FieldError(f"{path}.{field}", "FieldValueRequired", "Required value"))
    return errors


def check_workload(obj: dict[str, Any]) -> list[FieldError]:
    """A new Workload's spec."""
    spec = _spec(obj)
    path = "spec.podGroupTemplates"
    errors = _controller_ref_errors(spec.get("controllerRef"), "spec.controllerRef")
    templates = spec.get("podGroupTemplates")
    if not isinstance(templates, list) or not templates:
        return [*errors, FieldError(path, "FieldValueRequired", "Required value")]
    if len(templates) > MAX_POD_GROUP_TEMPLATES:
        detail = f"Too many: {len(templates)}: must have at most {MAX_POD_GROUP_TEMPLATES} items"
        return [*errors, FieldError(path, "FieldValueTooMany", detail)]
    errors += _unique(templates, path, ("name", "schedulingPolicy", "schedulingConstraints"))
    for index, template in enumerate(templates):
        if not isinstance(template, dict):
            continue
        tpath = f"{path}[{index}]"
        errors += dns_label_errors(template.get("name"), f"{tpath}.name")
        errors += _policy_errors(template.get("schedulingPolicy"), f"{tpath}.schedulingPolicy")
        errors += _claims_errors(template.get("resourceClaims"), f"{tpath}.resourceClaims")
    return errors


def check_workload_update(old: dict[str, Any], new: dict[str, Any]) -> list[FieldError]:
    """A Workload update: ``controllerRef`` and ``podGroupTemplates`` immutable."""
    old_spec, new_spec = _spec(old), _spec(new)
    return [
        FieldError(f"spec.{field}", "FieldValueInvalid", _IMMUTABLE)
        for field in ("controllerRef", "podGroupTemplates")
        if old_spec.get(field) != new_spec.get(field)
    ]
