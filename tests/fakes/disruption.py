"""PodDisruptionBudgets (policy/v1) and the pods' Eviction subresource, as kube-apiserver runs them.

``POST /api/v1/namespaces/NS/pods/NAME/eviction`` follows ``EvictionREST.Create``
(``pkg/registry/core/pod/storage/eviction.go``) step by step:

1. The body must be an Eviction (``policy/v1`` or ``policy/v1beta1``, or neither apiVersion nor kind
   given) whose ``metadata.name`` is the URL's, else 400. ``deleteOptions.dryRun`` is 400 (not
   emulated), like ``?dryRun``.
2. The pod is read: absent -> 404 ``pods "NAME" not found``.
3. A pod that is ``Succeeded``, ``Failed`` or ``Pending``, or already has a ``deletionTimestamp``,
   is deleted at once without looking at budgets (``canIgnorePDB``). Note that a pod created over
   HTTP is ``Pending`` until its status says otherwise.
4. Otherwise every PodDisruptionBudget of the namespace whose ``spec.selector`` matches the pod's
   labels is found (``LabelSelectorAsSelector``: a missing/null selector matches nothing; in
   policy/v1 an empty selector ``{}`` matches every pod of the namespace; an invalid selector matches
   nothing; kube-scheduler's preemption reads PDBs differently, an empty selector and unlabeled pods
   matching nothing there, which concerns victim ranking, not this handler). More than one -> 500
   ``This pod has more than one PodDisruptionBudget, which the eviction subresource does not
   support.`` (a Failure Status without ``reason``).
5. With one budget: a pod that is not Ready (no ``Ready=True`` condition) is deleted without
   spending the budget when ``spec.unhealthyPodEvictionPolicy`` is ``AlwaysAllow``, or when the
   stored ``status.currentHealthy >= status.desiredHealthy > 0``. Else ``checkAndDecrement``:
   ``status.observedGeneration`` below ``metadata.generation`` -> 429 "still being processed"
   (``Retry-After: 10``); ``disruptionsAllowed`` negative, or more than 2000 ``disruptedPods`` ->
   403; ``disruptionsAllowed == 0`` -> 429 ``Cannot evict pod as it would violate the pod's
   disruption budget.`` with the cause ``DisruptionBudget`` (no Retry-After) worded as 1.36 does:
   ``... does not allow evicting pods currently because it failed sync: MSG`` for a False
   ``DisruptionAllowed`` condition of reason ``SyncFailed``, else ``The disruption budget NAME needs
   D healthy pods and has C currently`` when ``currentHealthy <= desiredHealthy``, else ``... does
   not allow evicting pods currently (REASON): MSG`` for a False condition with a message, else
   ``The disruption budget NAME does not allow evicting pods currently``; otherwise
   ``disruptionsAllowed`` is decremented, the ``DisruptionAllowed`` condition turns False
   (``InsufficientPods``) when it reaches 0, and ``status.disruptedPods[pod] = now`` is written
   (one MODIFIED event on the budget; managedFields: ``kube-apiserver`` on ``status``).
6. The pod is deleted the way ``addConditionAndDeletePod`` does it: the ``deleteOptions``
   preconditions are checked against the current pod (uid, resourceVersion: 409 Conflict on
   ``Pod "NAME"``), the pod gets the ``DisruptionTarget`` condition (reason
   ``EvictionByEvictionAPI``; a MODIFIED event), then it is deleted as a DELETE would (finalizers
   only mark it; otherwise DELETED, after the graceful deletion's MODIFIED, and the garbage
   collection of its ResourceClaims and PodSchedulingContexts). As on a real server the
   preconditions are checked only here, after step 5: a stale uid on a pod under a budget with room
   still spends one disruption.
7. The answer is 201 with ``{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success",
   "code":201}``.

Fake's choices, documented: there is no disruption controller running. A budget's status is what
tests write (``put_object``, or a ``/status`` write) or what ``sync_status`` computes on demand
(``FakeApiServer.sync_disruption_budgets``); eviction only decrements it. A status without an
``observedGeneration`` counts as current (so a test may write just ``disruptionsAllowed``); write
one below ``metadata.generation`` to get the "still being processed" 429. When the status lacks
``desiredHealthy`` / ``currentHealthy``, the 429's numbers are computed from the current pods as
``sync_status`` would. The pod is deleted as a DELETE deletes it (``Registry.remove``: marked, then
gone at once, also after a grace period, since no kubelet runs).

``sync_status`` is one pass of the disruption controller, simplified: every pod the selector
matches counts as one expected replica (no scale lookups of owning controllers), ``currentHealthy``
counts the Ready ones that are not being deleted and not in ``disruptedPods``, ``desiredHealthy``
is ``minAvailable`` (an int, or a percentage of the expected pods rounded up) or expected minus
``maxUnavailable`` (the same rounding), ``disruptionsAllowed = max(0, current - desired)`` (0 with
no expected pods); ``disruptedPods`` entries whose pod is gone or being deleted are dropped (no
2-minute expiry).
"""

from __future__ import annotations

import copy
import math
import re
from typing import TYPE_CHECKING, Any

from . import status as st
from .status import FieldError

if TYPE_CHECKING:
    from .registry import Registry
    from .resources import ResourceType

__all__ = [
    "MAX_DISRUPTED_PODS",
    "check_pdb_spec",
    "check_pdb_status",
    "evict",
    "is_pod_ready",
    "matching_budgets",
    "selector_matches",
    "sync_status",
]

PDBS = ("policy", "poddisruptionbudgets")
PODS = ("", "pods")
#: ``MaxDisruptedPodSize`` of the eviction handler.
MAX_DISRUPTED_PODS = 2000
EVICTION_VERSIONS = ("policy/v1", "policy/v1beta1")
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
MORE_THAN_ONE = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_PERCENT = re.compile(r"^[0-9]+%$")
_PERCENT_HELP = (
    "a valid percent string must be a numeric string followed by an ending '%' "
    "(e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"
)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# --- selectors and pod health ---------------------------------------------------------------------


def _selector_valid(selector: dict[str, Any]) -> bool:
    labels = selector.get("matchLabels")
    if labels is not None and not (isinstance(labels, dict) and all(isinstance(v, str) for v in labels.values())):
        return False
    expressions = selector.get("matchExpressions")
    if expressions is None:
        return True
    if not isinstance(expressions, list):
        return False
    for expression in expressions:
        if not isinstance(expression, dict) or not isinstance(expression.get("key"), str):
            return False
        operator, values = expression.get("operator"), expression.get("values") or []
        if operator not in _OPERATORS or not isinstance(values, list):
            return False
        if (operator in ("In", "NotIn")) != bool(values):
            return False
    return True


def selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    """``metav1.LabelSelectorAsSelector(selector).Matches(labels)``: None (nil) matches nothing, an
    empty selector everything, an invalid one nothing (the eviction handler skips it)."""
    if not isinstance(selector, dict) or not _selector_valid(selector):
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, dict) else {}


def is_pod_ready(pod: dict[str, Any]) -> bool:
    """``podutil.IsPodReady``: a ``Ready`` condition with status ``True``."""
    for condition in _dict(pod.get("status")).get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def matching_budgets(registry: Registry, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The PodDisruptionBudgets of the pod's namespace that select it, in LIST order."""
    namespace = str(_meta(pod).get("namespace") or "")
    current = registry.storage.current(PDBS)
    return [
        current[key]
        for key in sorted(current)
        if key[0] == namespace and selector_matches(_dict(current[key].get("spec")).get("selector"), _labels(pod))
    ]


# --- the disruption controller's arithmetic --------------------------------------------------------


def _scaled(value: Any, total: int) -> int:
    """``intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true)``; invalid -> 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _PERCENT.match(value):
        return math.ceil(int(value[:-1]) * total / 100)
    return 0


def _counts(registry: Registry, pdb: dict[str, Any]) -> tuple[int, int, int, list[dict[str, Any]]]:
    """(expectedPods, desiredHealthy, currentHealthy, matching pods) of a budget now."""
    namespace, spec = str(_meta(pdb).get("namespace") or ""), _dict(pdb.get("spec"))
    pods = [
        pod
        for (pod_namespace, _), pod in sorted(registry.storage.current(PODS).items())
        if pod_namespace == namespace and selector_matches(spec.get("selector"), _labels(pod))
    ]
    disrupted = _dict(_dict(pdb.get("status")).get("disruptedPods"))
    expected = len(pods)
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    else:
        desired = _scaled(spec.get("minAvailable"), expected)
    current = sum(
        1
        for pod in pods
        if not _meta(pod).get("deletionTimestamp") and _meta(pod).get("name") not in disrupted and is_pod_ready(pod)
    )
    return expected, desired, current, pods


def _set_condition(status: dict[str, Any], allowed: bool, now: str) -> None:
    """``UpdateDisruptionAllowedCondition`` via ``meta.SetStatusCondition``."""
    new = {
        "type": "DisruptionAllowed",
        "status": "True" if allowed else "False",
        "reason": "SufficientPods" if allowed else "InsufficientPods",
        "message": "",
    }
    if status.get("observedGeneration"):
        new["observedGeneration"] = status["observedGeneration"]
    conditions = [dict(c) for c in status.get("conditions") or () if isinstance(c, dict)]
    for condition in conditions:
        if condition.get("type") == "DisruptionAllowed":
            if condition.get("status") != new["status"]:
                condition["lastTransitionTime"] = now
            condition.update(new)
            break
    else:
        conditions.append({**new, "lastTransitionTime": now})
    status["conditions"] = conditions


def sync_status(registry: Registry, pdb: dict[str, Any]) -> dict[str, Any]:
    """The status one pass of the disruption controller would write (module docstring)."""
    expected, desired, current, pods = _counts(registry, pdb)
    old = _dict(pdb.get("status"))
    live = {str(_meta(p).get("name")) for p in pods if not _meta(p).get("deletionTimestamp")}
    disrupted = {name: when for name, when in _dict(old.get("disruptedPods")).items() if name in live}
    status: dict[str, Any] = {k: v for k, v in old.items() if k == "conditions"}
    generation = _meta(pdb).get("generation")
    if generation:
        status["observedGeneration"] = generation
    if disrupted:
        status["disruptedPods"] = disrupted
    allowed = max(0, current - desired) if expected > 0 else 0
    status.update(disruptionsAllowed=allowed, currentHealthy=current, desiredHealthy=desired, expectedPods=expected)
    _set_condition(status, allowed > 0, registry.clock())
    if old.get("conditions") == status["conditions"] and {k: v for k, v in old.items() if k != "conditions"} == {
        k: v for k, v in status.items() if k != "conditions"
    }:
        return old
    return status


# --- validation -------------------------------------------------------------------------------------


def _int_or_percent_errors(value: Any, path: str) -> list[FieldError]:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return [FieldError(path, "FieldValueInvalid", f"Invalid value: {value!r}: must be an integer or percentage")]
    if isinstance(value, int):
        if value < 0:
            return [
                FieldError(path, "FieldValueInvalid", f"Invalid value: {value}: must be greater than or equal to 0")
            ]
        return []
    if not _PERCENT.match(value):
        return [FieldError(path, "FieldValueInvalid", f'Invalid value: "{value}": {_PERCENT_HELP}')]
    if int(value[:-1]) > 100:
        return [FieldError(path, "FieldValueInvalid", f'Invalid value: "{value}": must not be greater than 100%')]
    return []


def _selector_errors(selector: Any, path: str) -> list[FieldError]:
    """``ValidateLabelSelector``, the parts a test can trip over."""
    if selector is None:
        return []
    if not isinstance(selector, dict):
        return [FieldError(path, "FieldValueInvalid", "Invalid value: must be a LabelSelector object")]
    errors: list[FieldError] = []
    for index, expression in enumerate(selector.get("matchExpressions") or ()):
        where = f"{path}.matchExpressions[{index}]"
        if not isinstance(expression, dict):
            errors.append(FieldError(where, "FieldValueInvalid", "Invalid value: must be an object"))
            continue
        operator, values = expression.get("operator"), expression.get("values") or []
        if operator in ("In", "NotIn") and not values:
            errors.append(
                FieldError(
                    f"{where}.values",
                    "FieldValueRequired",
                    "Required value: must be specified when `operator` is 'In' or 'NotIn'",
                )
            )
        elif operator in ("Exists", "DoesNotExist") and values:
            errors.append(
                FieldError(
                    f"{where}.values",
                    "FieldValueForbidden",
                    "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )
            )
        elif operator not in _OPERATORS:
            errors.append(
                FieldError(
                    f"{where}.operator",
                    "FieldValueInvalid",
                    f'Invalid value: "{operator}": not a valid selector operator',
                )
            )
        if not expression.get("key"):
            errors.append(
                FieldError(f"{where}.key", "FieldValueInvalid", 'Invalid value: "": name part must be non-empty')
            )
    return errors


def check_pdb_spec(obj: dict[str, Any]) -> list[FieldError]:
    """``ValidatePodDisruptionBudgetSpec``: not both minAvailable and maxUnavailable, each a
    non-negative int or a percentage up to 100%, a valid selector and eviction policy."""
    spec = _dict(obj.get("spec"))
    errors: list[FieldError] = []
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        errors.append(
            FieldError(
                "spec",
                "FieldValueInvalid",
                'Invalid value: "object": minAvailable and maxUnavailable cannot be both set',
            )
        )
    for field in ("minAvailable", "maxUnavailable"):
        if spec.get(field) is not None:
            errors += _int_or_percent_errors(spec[field], f"spec.{field}")
    errors += _selector_errors(spec.get("selector"), "spec.selector")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in ("AlwaysAllow", "IfHealthyBudget"):
        errors.append(
            FieldError(
                "spec.unhealthyPodEvictionPolicy",
                "FieldValueNotSupported",
                f'Unsupported value: "{policy}": supported values: "AlwaysAllow", "IfHealthyBudget"',
            )
        )
    return errors


def check_pdb_status(status: Any) -> list[FieldError]:
    """``ValidatePodDisruptionBudgetStatusUpdate``: the counters are non-negative integers."""
    errors: list[FieldError] = []
    for field in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"):
        value = _dict(status).get(field)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            errors.append(
                FieldError(
                    f"status.{field}",
                    "FieldValueInvalid",
                    f"Invalid value: {value}: must be greater than or equal to 0",
                )
            )
    return errors


# --- eviction ---------------------------------------------------------------------------------------


def _delete_options(namespace: str, name: str, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise st.bad_request("the body of the request must be a JSON object")
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if api_version not in (None, "", *EVICTION_VERSIONS):
        raise st.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API version (policy/v1)"
        )
    if kind not in (None, "", "Eviction"):
        raise st.bad_request(f'no kind "{kind}" is registered for version "{api_version or "policy/v1"}"')
    meta = _dict(body.get("metadata"))
    if meta.get("namespace") and meta["namespace"] != namespace:
        raise st.bad_request("the namespace of the provided object does not match the namespace sent on the request")
    if meta.get("name") != name:
        raise st.bad_request("name in URL does not match name in Eviction object")
    options = body.get("deleteOptions")
    if options is not None and not isinstance(options, dict):
        raise st.bad_request("deleteOptions must be an object")
    if (options or {}).get("dryRun"):
        raise st.bad_request("dryRun is not emulated by the fake apiserver")
    return options or {}


def _too_many(message: str, retry_after: int = 0) -> st.ApiError:
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": message}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    body = st.status_body(429, "TooManyRequests", VIOLATION, details)
    return st.ApiError(body, headers={"Retry-After": str(retry_after)} if retry_after else None)


def _budget_forbidden(name: str, reason: str) -> st.ApiError:
    """``errors.NewForbidden(policy.Resource("poddisruptionbudget"), name, reason)``."""
    message = f'poddisruptionbudget.policy "{name}" is forbidden: {reason}'
    details = {"name": name, "group": "policy", "kind": "poddisruptionbudget"}
    return st.ApiError(st.status_body(403, "Forbidden", message, details))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _check_and_decrement(registry: Registry, pdb: dict[str, Any], pod_name: str) -> None:
    """``checkAndDecrement``: refuse (429/403) or spend one disruption and record the pod."""
    meta, status = _meta(pdb), _dict(pdb.get("status"))
    name = str(meta.get("name"))
    if "observedGeneration" in status and _int(status["observedGeneration"]) < _int(meta.get("generation")):
        raise _too_many(f"The disruption budget {name} is still being processed by the server.", 10)
    allowed = _int(status.get("disruptionsAllowed"))
    if allowed < 0:
        raise _budget_forbidden(name, "pdb disruptions allowed is negative")
    if len(_dict(status.get("disruptedPods"))) > MAX_DISRUPTED_PODS:
        raise _budget_forbidden(name, "DisruptedPods map too big - too many evictions not confirmed by PDB controller")
    if allowed == 0:
        raise _too_many(_refusal(registry, pdb))
    new_status = copy.deepcopy(status)
    new_status["disruptionsAllowed"] = allowed - 1
    now = registry.clock()
    if allowed - 1 == 0:
        _set_condition(new_status, False, now)
    new_status["disruptedPods"] = {**_dict(status.get("disruptedPods")), pod_name: now}
    registry.record_status_write(_budgets(), pdb, {**pdb, "status": new_status}, manager="kube-apiserver")


def _budgets() -> ResourceType:
    from .registry import resource_for_kind

    return resource_for_kind("PodDisruptionBudget")


def _refusal(registry: Registry, pdb: dict[str, Any]) -> str:
    """The cause of a 429 for a budget with no disruption left, as 1.36 words it: a failed sync
    first, then the healthy counts when they explain it, then the DisruptionAllowed condition.
    Counts missing from the status are computed from the current pods."""
    name, status = str(_meta(pdb).get("name")), _dict(pdb.get("status"))
    _, desired, current, _ = _counts(registry, pdb)
    desired = _int(status["desiredHealthy"]) if "desiredHealthy" in status else desired
    current = _int(status["currentHealthy"]) if "currentHealthy" in status else current
    condition = next(
        (c for c in status.get("conditions") or () if isinstance(c, dict) and c.get("type") == "DisruptionAllowed"),
        None,
    )
    failed = condition is not None and condition.get("status") == "False" and bool(condition.get("message"))
    if failed and condition is not None and condition.get("reason") == "SyncFailed":
        return (
            f"The disruption budget {name} does not allow evicting pods currently because it failed sync: "
            f"{condition['message']}"
        )
    if current <= desired:
        return f"The disruption budget {name} needs {desired} healthy pods and has {current} currently"
    if failed and condition is not None:
        return (
            f"The disruption budget {name} does not allow evicting pods currently "
            f"({condition.get('reason')}): {condition['message']}"
        )
    return f"The disruption budget {name} does not allow evicting pods currently"


def _can_ignore_budgets(pod: dict[str, Any]) -> bool:
    phase = _dict(pod.get("status")).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool(_meta(pod).get("deletionTimestamp"))


def _add_condition_and_delete(registry: Registry, namespace: str, name: str, options: dict[str, Any]) -> None:
    """``addConditionAndDeletePod``: preconditions on the latest pod, the DisruptionTarget
    condition, then the delete (finalizers and garbage collection as for DELETE)."""
    from .registry import resource_for_kind

    pods = resource_for_kind("Pod")
    pod = registry.storage.get(PODS, (namespace, name))
    if pod is None:
        raise st.not_found("pods", "", name)
    meta, preconditions = _meta(pod), _dict(options.get("preconditions"))
    uid, rv = preconditions.get("uid"), preconditions.get("resourceVersion")
    if uid and uid != meta.get("uid"):
        cause = (
            f"the UID in the precondition ({uid}) does not match the UID in record ({meta.get('uid')}). "
            "The object might have been deleted and then recreated"
        )
        raise st.conflict("Pod", "", name, cause)
    if rv and rv != meta.get("resourceVersion"):
        cause = (
            f"the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record "
            f"({meta.get('resourceVersion')}). The object might have been modified"
        )
        raise st.conflict("Pod", "", name, cause)
    new = copy.deepcopy(pod)
    status = new.setdefault("status", {})
    wanted = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    wanted["message"] = "Eviction API: evicting"
    conditions = [c for c in status.get("conditions") or () if isinstance(c, dict)]
    for condition in conditions:
        if condition.get("type") == "DisruptionTarget":
            if condition.get("status") != "True":
                condition["lastTransitionTime"] = registry.clock()
            condition.update(wanted)
            break
    else:
        conditions.append({**wanted, "lastProbeTime": None, "lastTransitionTime": registry.clock()})
    status["conditions"] = conditions
    if new != pod:
        registry.storage.commit(PODS, (namespace, name), new)
    registry.remove(pods, namespace, name, options=options)


def evict(registry: Registry, namespace: str, name: str, body: Any) -> dict[str, Any]:
    """``POST pods/NAME/eviction`` (module docstring); the Success Status, or ``ApiError``."""
    options = _delete_options(namespace, name, body)
    pod = registry.storage.get(PODS, (namespace, name))
    if pod is None:
        raise st.not_found("pods", "", name)
    if not _can_ignore_budgets(pod):
        budgets = matching_budgets(registry, pod)
        if len(budgets) > 1:
            failure = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
            raise st.ApiError({**failure, "message": MORE_THAN_ONE, "code": 500})
        if budgets:
            pdb = budgets[0]
            spec, status = _dict(pdb.get("spec")), _dict(pdb.get("status"))
            desired, current = _int(status.get("desiredHealthy")), _int(status.get("currentHealthy"))
            unhealthy_ok = spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow" or current >= desired > 0
            if is_pod_ready(pod) or not unhealthy_ok:
                _check_and_decrement(registry, pdb, name)
    _add_condition_and_delete(registry, namespace, name, options)
    return st.success(201)
