"""The apiserver's validation for the writes the fake accepts, as field errors (-> 422 Invalid).

Covers what dra-extender can trip over: object names (RFC 1123 subdomains), labels (qualified
names and label values) and annotation keys, finalizers (none may be added once deletion
started), a changed uid, immutable specs (claims, claim templates, pods), the parts of a claim's
spec a client gets wrong (``check_claim_spec``: request names, counts and modes, device classes),
and the ResourceClaim status rules of ``validateResourceClaimStatusUpdate``: ``reservedFor`` at
most 256 entries, unique by uid, only with an allocation, no new consumers while the claim is
being deleted, and an allocation that is checked when it is set and cannot change afterwards.
Messages follow ``field.Error`` (``<path>: <Type>: <detail>``) with kube-apiserver 1.36's words.
Comparisons are on raw JSON after the fake's defaulting (``defaults.py``), so a client must echo
what it read.

resource.k8s.io v1alpha3 is validated as Kubernetes 1.31 did (VAL131, classic DRA): at most 32
``reservedFor`` entries, list limits reported as 1.31's ``field.TooLongMaxLength`` (``Too long:
may not be longer than N``) rather than the newer ``Too many: N: must have at most M items``, the
``deallocationRequested`` rules, ``spec.controller`` / ``status.allocation.controller`` as CSI
driver names, and PodSchedulingContext (``potentialNodes`` and ``unsuitableNodes`` sets of at most
128 node names, claim entries unique by name; QUIRK: status errors under ``status.claims``).
"""

from __future__ import annotations

import re
from typing import Any

from .status import FieldError

__all__ = [
    "CLASSIC_VERSION",
    "MAX_NODE_LIST",
    "MAX_RESERVED_FOR",
    "MAX_RESERVED_FOR_V1ALPHA3",
    "check_claim_spec",
    "check_claim_status",
    "check_driver_name",
    "check_immutable_spec",
    "check_metadata",
    "check_metadata_update",
    "check_name",
    "check_no_new_finalizers",
    "check_node_name_set",
    "check_pod_scheduling_spec",
    "check_pod_scheduling_status",
    "dns_label_errors",
    "qualified_name_problems",
    "subdomain_errors",
]

#: resource.ResourceClaimReservedForMaxSize.
MAX_RESERVED_FOR = 256
#: The same limit in 1.31, the release whose v1alpha3 the fake emulates.
MAX_RESERVED_FOR_V1ALPHA3 = 32
#: resource.PodSchedulingNodeListMaxSize (the KEP text says 256; the code says 128).
MAX_NODE_LIST = 128
#: CSI driver names (``ValidateCSIDriverName``), used for ``controller`` fields.
MAX_DRIVER_NAME = 63
#: The resource.k8s.io version of 1.31's classic DRA.
CLASSIC_VERSION = "v1alpha3"
#: resource.AllocationResultsMaxSize.
MAX_ALLOCATION_RESULTS = 32

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SUBDOMAIN_HELP = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_QUALIFIED_NAME_HELP = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_VALUE_HELP = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
    "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_LABEL_HELP = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def qualified_name_problems(value: str) -> list[str]:
    """``IsQualifiedName``: an optional DNS subdomain prefix and ``/``, then a name part."""
    parts = value.split("/")
    problems: list[str] = []
    if len(parts) > 2:
        return [
            "a qualified name " + _QUALIFIED_NAME_HELP + " with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                problems.append("prefix part must be no more than 253 characters")
            if not _SUBDOMAIN.match(prefix):
                problems.append("prefix part " + _SUBDOMAIN_HELP)
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > 63:
        problems.append("name part must be no more than 63 characters")
    if not _QUALIFIED_NAME.match(name):
        problems.append("name part " + _QUALIFIED_NAME_HELP)
    return problems


def _label_errors(labels: dict[str, str]) -> list[FieldError]:
    """``ValidateLabels``: keys are qualified names, values valid label values; every error is
    reported on ``metadata.labels`` quoting the key or value."""
    errors: list[FieldError] = []
    for key, value in labels.items():
        for problem in qualified_name_problems(key):
            errors.append(FieldError("metadata.labels", "FieldValueInvalid", f'Invalid value: "{key}": {problem}'))
        if len(value) > 63:
            errors.append(
                FieldError(
                    "metadata.labels",
                    "FieldValueInvalid",
                    f'Invalid value: "{value}": must be no more than 63 characters',
                )
            )
        if not _LABEL_VALUE.match(value):
            errors.append(
                FieldError("metadata.labels", "FieldValueInvalid", f'Invalid value: "{value}": {_LABEL_VALUE_HELP}')
            )
    return errors


def _annotation_errors(annotations: dict[str, str]) -> list[FieldError]:
    """``ValidateAnnotations``: keys are qualified names (checked lower-cased)."""
    errors: list[FieldError] = []
    for key in annotations:
        for problem in qualified_name_problems(key.lower()):
            errors.append(FieldError("metadata.annotations", "FieldValueInvalid", f'Invalid value: "{key}": {problem}'))
    return errors


def dns_label_errors(value: Any, path: str) -> list[FieldError]:
    """``ValidateDNS1123Label`` (``Required value`` when empty)."""
    if not isinstance(value, str) or not value:
        return [FieldError(path, "FieldValueRequired", "Required value")]
    errors: list[FieldError] = []
    if len(value) > 63:
        errors.append(
            FieldError(path, "FieldValueInvalid", f'Invalid value: "{value}": must be no more than 63 characters')
        )
    if not _DNS_LABEL.match(value):
        errors.append(FieldError(path, "FieldValueInvalid", f'Invalid value: "{value}": {_DNS_LABEL_HELP}'))
    return errors


def check_name(name: Any, path: str = "metadata.name") -> list[FieldError]:
    if not isinstance(name, str) or not name:
        return [FieldError(path, "FieldValueRequired", "Required value: name or generateName is required")]
    if len(name) > 253:
        return [FieldError(path, "FieldValueInvalid", f'Invalid value: "{name}": must be no more than 253 characters')]
    if not _SUBDOMAIN.match(name):
        return [FieldError(path, "FieldValueInvalid", f'Invalid value: "{name}": {_SUBDOMAIN_HELP}')]
    return []


def subdomain_errors(value: str, path: str, shown: str | None = None) -> list[FieldError]:
    """``IsDNS1123Subdomain`` as ``field.Invalid`` errors (both the length and the pattern can fail);
    ``shown`` is the value the message quotes when another string was checked."""
    quoted = value if shown is None else shown
    errors: list[FieldError] = []
    if len(value) > 253:
        errors.append(
            FieldError(path, "FieldValueInvalid", f'Invalid value: "{quoted}": must be no more than 253 characters')
        )
    if not _SUBDOMAIN.match(value):
        errors.append(FieldError(path, "FieldValueInvalid", f'Invalid value: "{quoted}": {_SUBDOMAIN_HELP}'))
    return errors


def _too_long(path: str, limit: int) -> FieldError:
    """1.31's list limit error (``validateSlice`` used ``field.TooLongMaxLength``, whose message
    omits the value)."""
    return FieldError(path, "FieldValueTooLong", f"Too long: may not be longer than {limit}")


def check_driver_name(name: Any, path: str) -> list[FieldError]:
    """``ValidateCSIDriverName`` for a set ``controller``: at most 63 characters, a DNS subdomain
    once lowercased (upper case letters pass, as upstream lowercases before matching)."""
    if not isinstance(name, str):
        return [FieldError(path, "FieldValueInvalid", "Invalid value: must be a string")]
    errors: list[FieldError] = []
    if len(name) > MAX_DRIVER_NAME:
        errors.append(_too_long(path, MAX_DRIVER_NAME))
    return errors + subdomain_errors(name.lower(), path, shown=name)


def check_node_name_set(nodes: Any, path: str) -> list[FieldError]:
    """``validateSet(nodes, PodSchedulingNodeListMaxSize, validateNodeName, stringKey)``: each entry
    a node name (DNS subdomain), at most 128, no duplicates; reported in upstream's order (entries,
    then the length, then duplicates)."""
    if nodes is None:
        return []
    if not isinstance(nodes, list):
        return [FieldError(path, "FieldValueInvalid", "Invalid value: must be a list")]
    errors: list[FieldError] = []
    for index, node in enumerate(nodes):
        if isinstance(node, str):
            errors.extend(subdomain_errors(node, f"{path}[{index}]"))
        else:
            errors.append(FieldError(f"{path}[{index}]", "FieldValueInvalid", "Invalid value: must be a string"))
    if len(nodes) > MAX_NODE_LIST:
        errors.append(_too_long(path, MAX_NODE_LIST))
    seen: set[str] = set()
    for index, node in enumerate(nodes):
        if not isinstance(node, str):
            continue
        if node in seen:
            errors.append(FieldError(f"{path}[{index}]", "FieldValueDuplicate", f'Duplicate value: "{node}"'))
        seen.add(node)
    return errors


def check_pod_scheduling_spec(obj: dict[str, Any]) -> list[FieldError]:
    """``validatePodSchedulingSpec`` (create and main-resource update): ``potentialNodes`` only.
    1.31 does not check ``selectedNode`` beyond its type, so neither does the fake."""
    spec = obj.get("spec")
    if spec is None:
        return []
    if not isinstance(spec, dict):
        return [FieldError("spec", "FieldValueInvalid", "Invalid value: must be an object")]
    errors = check_node_name_set(spec.get("potentialNodes"), "spec.potentialNodes")
    selected = spec.get("selectedNode")
    if selected is not None and not isinstance(selected, str):
        errors.append(FieldError("spec.selectedNode", "FieldValueInvalid", "Invalid value: must be a string"))
    return errors


def check_pod_scheduling_status(status: Any) -> list[FieldError]:
    """``validatePodSchedulingStatus`` (status updates): every ``resourceClaims`` entry's
    ``unsuitableNodes`` a node-name set, entries unique by ``name`` (the duplicate reported on the
    entry). QUIRK kept from upstream: the paths say ``status.claims[i]``, not
    ``status.resourceClaims[i]``. 1.31 does not require ``name`` (two unnamed entries are
    duplicates of ""), and neither does the fake."""
    if status is None:
        return []
    if not isinstance(status, dict):
        return [FieldError("status", "FieldValueInvalid", "Invalid value: must be an object")]
    claims = status.get("resourceClaims")
    if claims is None:
        return []
    path = "status.claims"
    if not isinstance(claims, list):
        return [FieldError(path, "FieldValueInvalid", "Invalid value: must be a list")]
    errors: list[FieldError] = []
    names: set[str] = set()
    for index, entry in enumerate(claims):
        epath = f"{path}[{index}]"
        if not isinstance(entry, dict):
            errors.append(FieldError(epath, "FieldValueInvalid", "Invalid value: must be an object"))
            continue
        errors.extend(check_node_name_set(entry.get("unsuitableNodes"), f"{epath}.unsuitableNodes"))
        name = str(entry.get("name") or "")
        if name in names:
            errors.append(FieldError(epath, "FieldValueDuplicate", f'Duplicate value: "{name}"'))
        names.add(name)
    return errors


def check_claim_spec(version: str, obj: dict[str, Any], *, template: bool = False) -> list[FieldError]:
    """``validateResourceClaimSpec`` on create, the parts a test can trip over: request names (DNS
    labels, unique, at most 32), exactly one of ``exactly`` / ``firstAvailable`` (at most 8
    subrequests, unique names), ``deviceClassName`` (required, a DNS subdomain), ``allocationMode``
    and ``count``; v1beta1's flat requests are reported under ``exactly``, as upstream normalises
    its paths. Selectors, constraints, config and tolerations are not checked. In v1alpha3 a set
    ``spec.controller`` must be a driver name (VAL131; the spec is immutable afterwards).
    ``template``: the claim spec of a ResourceClaimTemplate (``spec.spec``)."""
    spec = obj.get("spec")
    if template:
        spec = spec.get("spec") if isinstance(spec, dict) else None
    prefix = "spec.spec" if template else "spec"
    if not isinstance(spec, dict):
        return []
    if version == CLASSIC_VERSION:
        if template or spec.get("controller") in (None, ""):
            return []
        return check_driver_name(spec["controller"], "spec.controller")
    devices = spec.get("devices")
    requests = (devices.get("requests") if isinstance(devices, dict) else None) or []
    if not isinstance(requests, list):
        return [FieldError(f"{prefix}.devices.requests", "FieldValueInvalid", "Invalid value: must be a list")]
    flat = version == "v1beta1"
    path = f"{prefix}.devices.requests"
    errors: list[FieldError] = []
    for index, request in enumerate(requests):
        if isinstance(request, dict):
            errors += _request_errors(request, f"{path}[{index}]", flat=flat)
    return errors + _set_errors(requests, path, MAX_REQUESTS)


#: resource.DeviceRequestsMaxSize and FirstAvailableDeviceRequestMaxSize.
MAX_REQUESTS = 32
MAX_SUBREQUESTS = 8


def _set_errors(items: list[Any], path: str, limit: int) -> list[FieldError]:
    """A list of named items: at most ``limit``, names unique (the duplicate reported on the item)."""
    errors: list[FieldError] = []
    if len(items) > limit:
        errors.append(FieldError(path, "FieldValueTooMany", f"Too many: {len(items)}: must have at most {limit} items"))
    seen: set[str] = set()
    for index, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str):
            continue
        if name in seen:
            errors.append(FieldError(f"{path}[{index}]", "FieldValueDuplicate", f'Duplicate value: "{name}"'))
        seen.add(name)
    return errors


def _request_errors(request: dict[str, Any], path: str, *, flat: bool) -> list[FieldError]:
    errors = dns_label_errors(request.get("name"), f"{path}.name")
    subrequests = request.get("firstAvailable") or []
    if flat:
        exactly: Any = None if subrequests else request
    else:
        exactly = request.get("exactly")
    kinds = (1 if subrequests else 0) + (1 if exactly is not None else 0)
    if kinds == 0:
        errors.append(
            FieldError(
                path, "FieldValueRequired", "Required value: exactly one of `exactly` or `firstAvailable` is required"
            )
        )
    elif kinds > 1:
        errors.append(
            FieldError(
                path,
                "FieldValueInvalid",
                "Invalid value: null: exactly one of `exactly` or `firstAvailable` is required, "
                "but multiple fields are set",
            )
        )
    elif subrequests:
        if not isinstance(subrequests, list):
            return [*errors, FieldError(f"{path}.firstAvailable", "FieldValueInvalid", "Invalid value: must be a list")]
        for index, sub in enumerate(subrequests):
            if isinstance(sub, dict):
                spath = f"{path}.firstAvailable[{index}]"
                errors += dns_label_errors(sub.get("name"), f"{spath}.name") + _exact_errors(sub, spath)
        errors += _set_errors(subrequests, f"{path}.firstAvailable", MAX_SUBREQUESTS)
    elif isinstance(exactly, dict):
        errors += _exact_errors(exactly, f"{path}.exactly")
    return errors


def _exact_errors(exact: dict[str, Any], path: str) -> list[FieldError]:
    """deviceClassName and allocationMode/count of an exact request or a subrequest."""
    class_name = exact.get("deviceClassName")
    if not isinstance(class_name, str) or not class_name:
        errors = [FieldError(f"{path}.deviceClassName", "FieldValueRequired", "Required value")]
    else:
        errors = subdomain_errors(class_name, f"{path}.deviceClassName")
    mode, count = exact.get("allocationMode"), exact.get("count")
    if mode == "All":
        if count not in (None, 0):
            errors.append(
                FieldError(
                    f"{path}.count",
                    "FieldValueInvalid",
                    f"Invalid value: {count}: must not be specified when allocationMode is 'All'",
                )
            )
    elif mode == "ExactCount":
        if not isinstance(count, int) or count <= 0:
            errors.append(
                FieldError(f"{path}.count", "FieldValueInvalid", f"Invalid value: {count}: must be greater than zero")
            )
    else:
        errors.append(
            FieldError(
                f"{path}.allocationMode",
                "FieldValueNotSupported",
                f'Unsupported value: "{mode}": supported values: "All", "ExactCount"',
            )
        )
    return errors


def check_metadata(meta: dict[str, Any]) -> list[FieldError]:
    """Shapes of user-settable metadata (labels, annotations, finalizers, ownerReferences)."""
    errors: list[FieldError] = []
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is not None and (
            not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        ):
            errors.append(
                FieldError(f"metadata.{field}", "FieldValueInvalid", "Invalid value: must map strings to strings")
            )
        elif value:
            errors += _label_errors(value) if field == "labels" else _annotation_errors(value)
    finalizers = meta.get("finalizers")
    if finalizers is not None:
        if not isinstance(finalizers, list) or not all(isinstance(f, str) and f for f in finalizers):
            errors.append(
                FieldError(
                    "metadata.finalizers", "FieldValueInvalid", "Invalid value: must be a list of non-empty strings"
                )
            )
        elif len(set(finalizers)) != len(finalizers):
            duplicate = next(f for f in finalizers if finalizers.count(f) > 1)
            errors.append(FieldError("metadata.finalizers", "FieldValueDuplicate", f'Duplicate value: "{duplicate}"'))
    owners = meta.get("ownerReferences")
    if owners is not None and (not isinstance(owners, list) or not all(isinstance(o, dict) for o in owners)):
        errors.append(
            FieldError("metadata.ownerReferences", "FieldValueInvalid", "Invalid value: must be a list of objects")
        )
    return errors


def check_metadata_update(old_meta: dict[str, Any], new_meta: dict[str, Any]) -> list[FieldError]:
    """``ValidateObjectMeta`` of the new metadata, then ``ValidateObjectMetaUpdate``, the parts the
    fake checks: finalizers added while the object is being deleted, a changed ``uid`` (a body's
    uid that is not the stored one; an absent one is filled in), and the label and annotation rules
    again (upstream's update check repeats them). The apiserver runs this pair twice on every
    update (``validateCommonFields``, then the strategy), so ``registry`` doubles the list: a bad
    label is four causes of the 422, a new finalizer two."""
    errors = check_metadata(new_meta) + check_no_new_finalizers(old_meta, new_meta)
    uid = new_meta.get("uid")
    if uid and uid != old_meta.get("uid"):
        errors.append(FieldError("metadata.uid", "FieldValueInvalid", f'Invalid value: "{uid}": field is immutable'))
    return errors + [e for e in check_metadata(new_meta) if e.field in ("metadata.labels", "metadata.annotations")]


def check_no_new_finalizers(old_meta: dict[str, Any], new_meta: dict[str, Any]) -> list[FieldError]:
    """``ValidateObjectMetaUpdate``: an object being deleted may lose finalizers, never gain one."""
    if not old_meta.get("deletionTimestamp"):
        return []
    old = set(old_meta.get("finalizers") or ())
    added = [f for f in new_meta.get("finalizers") or () if f not in old]
    if not added:
        return []
    found = ", ".join(f'"{f}"' for f in added)
    detail = (
        "Forbidden: no new finalizers can be added if the object is being deleted, "
        f"found new finalizers []string{{{found}}}"
    )
    return [FieldError("metadata.finalizers", "FieldValueForbidden", detail)]


def check_immutable_spec(kind: str, old: dict[str, Any], new: dict[str, Any]) -> list[FieldError]:
    """Specs the apiserver refuses to change: ResourceClaim and ResourceClaimTemplate (whole spec
    immutable) and Pod (only the few mutable pod fields, which the fake does not single out)."""
    if old.get("spec") == new.get("spec"):
        return []
    if kind in ("ResourceClaim", "ResourceClaimTemplate"):
        return [FieldError("spec", "FieldValueInvalid", 'Invalid value: "object": field is immutable')]
    if kind == "Pod":
        detail = (
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
            "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
            "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
            "(allow it to be set to 1 if it was previously negative)"
        )
        return [FieldError("spec", "FieldValueForbidden", detail)]
    return []


def _request_names(claim: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ():
        if not isinstance(request, dict):
            continue
        name = request.get("name")
        names.add(str(name))
        for sub in request.get("firstAvailable") or ():
            if isinstance(sub, dict):
                names.add(f"{name}/{sub.get('name')}")
    return names


def _check_allocation(claim: dict[str, Any], allocation: Any) -> list[FieldError]:
    path = "status.allocation"
    if not isinstance(allocation, dict):
        return [FieldError(path, "FieldValueInvalid", "Invalid value: must be an object")]
    results = (allocation.get("devices") or {}).get("results") or []
    if not isinstance(results, list):
        return [FieldError(f"{path}.devices.results", "FieldValueInvalid", "Invalid value: must be a list")]
    errors: list[FieldError] = []
    if len(results) > MAX_ALLOCATION_RESULTS:
        errors.append(
            FieldError(
                f"{path}.devices.results",
                "FieldValueTooMany",
                f"Too many: {len(results)}: must have at most {MAX_ALLOCATION_RESULTS} items",
            )
        )
    known = _request_names(claim)
    for index, result in enumerate(results):
        rpath = f"{path}.devices.results[{index}]"
        if not isinstance(result, dict):
            errors.append(FieldError(rpath, "FieldValueInvalid", "Invalid value: must be an object"))
            continue
        for field in ("request", "driver", "pool", "device"):
            if not isinstance(result.get(field), str) or not result.get(field):
                errors.append(FieldError(f"{rpath}.{field}", "FieldValueRequired", "Required value"))
        request = result.get("request")
        if isinstance(request, str) and request and request not in known:
            errors.append(
                FieldError(
                    f"{rpath}.request",
                    "FieldValueInvalid",
                    f'Invalid value: "{request}": must be the name of a request in the claim '
                    "or the name of a request and a subrequest separated by '/'",
                )
            )
    return errors


def _consumer(entry: dict[str, Any]) -> tuple[str, str, str, str]:
    return (entry.get("apiGroup") or "", entry.get("resource") or "", entry.get("name") or "", entry.get("uid") or "")


def _check_reserved_for(reserved: Any, version: str) -> list[FieldError]:
    path = "status.reservedFor"
    if not isinstance(reserved, list):
        return [FieldError(path, "FieldValueInvalid", "Invalid value: must be a list")]
    errors: list[FieldError] = []
    if version == CLASSIC_VERSION:
        if len(reserved) > MAX_RESERVED_FOR_V1ALPHA3:
            errors.append(_too_long(path, MAX_RESERVED_FOR_V1ALPHA3))
    elif len(reserved) > MAX_RESERVED_FOR:
        errors.append(
            FieldError(
                path, "FieldValueTooMany", f"Too many: {len(reserved)}: must have at most {MAX_RESERVED_FOR} items"
            )
        )
    seen: set[str] = set()
    for index, entry in enumerate(reserved):
        epath = f"{path}[{index}]"
        if not isinstance(entry, dict):
            errors.append(FieldError(epath, "FieldValueInvalid", "Invalid value: must be an object"))
            continue
        for field in ("resource", "name", "uid"):
            if not isinstance(entry.get(field), str) or not entry.get(field):
                errors.append(FieldError(f"{epath}.{field}", "FieldValueRequired", "Required value"))
        uid = entry.get("uid")
        if isinstance(uid, str) and uid:
            if uid in seen:
                errors.append(FieldError(epath, "FieldValueDuplicate", f'Duplicate value: "{uid}"'))
            seen.add(uid)
    return errors


def _check_deallocation(old_status: dict[str, Any], status: dict[str, Any]) -> list[FieldError]:
    """VAL131's ``deallocationRequested`` rules (v1alpha3): it is set only together with clearing
    ``reservedFor``, needs an allocation, and goes only together with the allocation."""
    before, after = bool(old_status.get("deallocationRequested")), bool(status.get("deallocationRequested"))
    reserved, allocation = status.get("reservedFor") or [], status.get("allocation")
    path = "status.deallocationRequested"
    errors: list[FieldError] = []
    if not before and after and reserved:
        errors.append(
            FieldError(
                path, "FieldValueForbidden", "Forbidden: deallocation cannot be requested while `reservedFor` is set"
            )
        )
    if allocation is None and after:
        # Upstream reports this one on the status itself ("either field may be the wrong one").
        errors.append(
            FieldError(
                "status",
                "FieldValueForbidden",
                "Forbidden: `allocation` must be set when `deallocationRequested` is set",
            )
        )
    if before and not after and allocation is not None:
        errors.append(FieldError(path, "FieldValueForbidden", "Forbidden: may not be cleared when `allocation` is set"))
    return errors


def check_claim_status(old: dict[str, Any], status: Any, *, version: str = "v1") -> list[FieldError]:
    """``validateResourceClaimStatusUpdate`` for a status write replacing ``old``'s status, in the
    resource.k8s.io ``version`` of the request (v1alpha3: 1.31's rules, see the module docstring)."""
    if not isinstance(status, dict):
        return [FieldError("status", "FieldValueInvalid", "Invalid value: must be an object")]
    reserved = status.get("reservedFor") or []
    errors = _check_reserved_for(reserved, version)
    if errors:
        return errors
    allocation = status.get("allocation")
    old_status = old.get("status") or {}
    old_allocation = old_status.get("allocation")
    classic = version == CLASSIC_VERSION
    if allocation is not None and old_allocation is None:  # a set allocation is only checked for immutability
        errors.extend(_check_allocation(old, allocation))
        if classic and isinstance(allocation, dict) and allocation.get("controller") not in (None, ""):
            errors.extend(check_driver_name(allocation["controller"], "status.allocation.controller"))
    if reserved and allocation is None:
        errors.append(
            FieldError(
                "status.reservedFor",
                "FieldValueForbidden",
                "Forbidden: may not be specified when `allocated` is not set",
            )
        )
    deallocating = classic and bool(status.get("deallocationRequested"))
    if reserved and ((old.get("metadata") or {}).get("deletionTimestamp") or deallocating):
        before = {_consumer(e) for e in old_status.get("reservedFor") or () if isinstance(e, dict)}
        if any(_consumer(e) not in before for e in reserved):
            errors.append(
                FieldError(
                    "status.reservedFor",
                    "FieldValueForbidden",
                    "Forbidden: new entries may not be added while `deallocationRequested` or "
                    "`deletionTimestamp` are set",
                )
            )
    if old_allocation is not None and allocation is not None and old_allocation != allocation:
        errors.append(
            FieldError("status.allocation", "FieldValueInvalid", 'Invalid value: "object": field is immutable')
        )
    if classic:
        errors.extend(_check_deallocation(old_status, status))
    return errors
