"""Server-side apply, simplified, for the types whose ``ResourceType.apply`` is set
(PodSchedulingContext: 1.31's scheduler and drivers write the context's spec this way).

The request: ``PATCH`` of the object's URL with ``Content-Type: application/apply-patch+yaml``,
``?fieldManager=NAME`` (required: 422 ``PatchOptions.meta.k8s.io "" is invalid: fieldManager:
Required value: is required for apply patch``) and optionally ``?force=true``. The body is the
applied configuration, JSON or YAML, with ``apiVersion`` and ``kind``.

What the fake does (a simplification of structured-merge-diff; tests may rely on exactly this):

- Ownership is tracked per top-level ``spec`` field (``spec.selectedNode``,
  ``spec.potentialNodes``) in a side table (``FieldOwners``, keyed by the object's uid), never in
  ``metadata.managedFields``, which the fake does not write.
- A manager is (name, operation). An apply is ``Apply`` by its ``fieldManager``; a create, update
  or non-apply patch is ``Update`` by its ``?fieldManager`` or, as the apiserver defaults it, the
  User-Agent up to the first ``/``. The spec fields of a stored object that no manager is known to
  own (written with ``put_object``) belong to ``before-first-apply`` (Update), as when an object
  without managedFields is applied the first time. An update takes the fields it changes from
  every other manager (updates never conflict).
- Object absent: the configuration creates it (metadata as given: name, labels, annotations,
  ownerReferences, finalizers; status dropped; validated as a POST); answer 201.
- Object present: every spec field of the configuration replaces the stored one (lists whole: no
  set or map merging of ``potentialNodes``); ``null`` values count as omitted; a field this
  manager applied before and omits now is removed, unless another manager owns it too. Metadata:
  labels and annotations are merged key by key (never removed), ``ownerReferences`` and
  ``finalizers`` replaced when given; ``status`` is ignored (use the status subresource).
  ``metadata.resourceVersion`` / ``uid`` in the configuration are preconditions (409 when stale).
- Conflict: a configured field whose value differs from the stored one and that another manager
  owns is a 409 ``Apply failed with 1 conflict: conflict with "other": .spec.selectedNode``
  (several: ``Apply failed with N conflicts: conflicts with "other":\\n- .spec.a``, as upstream);
  ``force=true`` takes such fields over instead. The same value is shared ownership, no conflict.
- An apply that changes only ownership writes nothing (same resourceVersion, no watch event);
  the real server would record the new managedFields.
- Apply to other kinds, or to the ``status`` subresource, is 415 as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import orjson
import yaml

from .status import ApiError, FieldError, bad_request, invalid, status_body

__all__ = [
    "APPLY",
    "APPLY_PATCH",
    "BEFORE_FIRST_APPLY",
    "UPDATE",
    "FieldOwners",
    "Manager",
    "apply_conflict",
    "default_manager",
    "missing_field_manager",
    "parse_apply_body",
    "plan_apply",
    "spec_of",
    "updated_owners",
]

APPLY_PATCH = "application/apply-patch+yaml"
APPLY, UPDATE = "Apply", "Update"
#: The manager the apiserver gives the fields of an object first applied without managedFields.
BEFORE_FIRST_APPLY = "before-first-apply"


@dataclass(frozen=True)
class Manager:
    """One field manager of one object (a ``managedFields`` entry, reduced to top-level spec
    fields); ``time`` of its last write (Update managers; printed in conflicts)."""

    name: str
    operation: str
    api_version: str
    fields: frozenset[str]
    time: str | None = None

    @property
    def identity(self) -> tuple[str, str]:
        return self.name, self.operation

    def describe(self) -> str:
        """As upstream's ``printManager``: Update managers name their apiVersion and time."""
        text = f'"{self.name}"'
        if self.operation == UPDATE:
            text += f" using {self.api_version}"
            if self.time:
                text += f" at {self.time}"
        return text


class FieldOwners:
    """The side table: managers per object uid. Entries without fields are dropped, as the
    apiserver drops empty managedFields entries."""

    def __init__(self) -> None:
        self._by_uid: dict[str, tuple[Manager, ...]] = {}

    def managers(self, uid: str) -> list[Manager]:
        return list(self._by_uid.get(uid, ()))

    def set(self, uid: str, managers: Iterable[Manager]) -> None:
        kept = tuple(m for m in managers if m.fields)
        if kept:
            self._by_uid[uid] = kept
        else:
            self._by_uid.pop(uid, None)

    def forget(self, uid: str) -> None:
        self._by_uid.pop(uid, None)

    def owned(self, uid: str) -> dict[str, list[str]]:
        """{manager name (with `` (Update)`` for Update managers): sorted fields}, for tests."""
        return {
            m.name if m.operation == APPLY else f"{m.name} ({UPDATE})": sorted(m.fields) for m in self.managers(uid)
        }


def spec_of(obj: dict[str, Any] | None) -> dict[str, Any]:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, dict) else {}


def default_manager(user_agent: str) -> str:
    """The manager of a write without ``?fieldManager`` (``prefixFromUserAgent``)."""
    return user_agent.split("/")[0]


def parse_apply_body(raw: bytes) -> Any:
    """The applied configuration: JSON (valid YAML) first, then YAML; 400 if neither."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as error:
        raise bad_request(f"error decoding YAML: {error}") from None


def missing_field_manager() -> ApiError:
    """``ValidatePatchOptions``: apply needs a field manager."""
    return invalid(
        "PatchOptions",
        "meta.k8s.io",
        "",
        [FieldError("fieldManager", "FieldValueRequired", "Required value: is required for apply patch")],
    )


def apply_conflict(conflicts: list[tuple[Manager, str]]) -> ApiError:
    """409 from apply (``NewApplyConflict``): the message and one cause per (manager, path)."""
    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {m.describe()}", "field": path}
        for m, path in conflicts
    ]
    if len(conflicts) == 1:
        manager, path = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {manager.describe()}: {path}"
    else:
        by_manager: dict[str, list[str]] = {}
        for manager, path in conflicts:
            by_manager.setdefault(manager.describe(), []).append(path)
        lines: list[str] = []
        for described in sorted(by_manager):
            lines.append(f"conflicts with {described}:")
            lines.extend(f"- {path}" for path in by_manager[described])
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(status_body(409, "Conflict", message, {"causes": causes}))


def updated_owners(
    managers: list[Manager], name: str, api_version: str, time: str, old_spec: dict[str, Any], new_spec: dict[str, Any]
) -> list[Manager]:
    """Ownership after an Update by ``name``: it takes every field it changed (set or altered)
    from the others; removed fields belong to nobody."""
    changed = {f for f in old_spec.keys() | new_spec.keys() if old_spec.get(f) != new_spec.get(f)}
    gone = old_spec.keys() - new_spec.keys()
    result: list[Manager] = []
    mine: frozenset[str] = frozenset()
    for manager in managers:
        if manager.identity == (name, UPDATE):
            mine = manager.fields
        else:
            result.append(replace(manager, fields=manager.fields - changed))
    fields = (mine - gone) | (changed & new_spec.keys())
    result.append(Manager(name, UPDATE, api_version, frozenset(fields), time))
    return result


def _with_unowned(managers: list[Manager], spec: dict[str, Any], api_version: str) -> list[Manager]:
    owned = set().union(*(m.fields for m in managers)) if managers else set()
    unowned = frozenset(spec.keys() - owned)
    if not unowned:
        return managers
    before = next((m for m in managers if m.identity == (BEFORE_FIRST_APPLY, UPDATE)), None)
    rest = [m for m in managers if m is not before]
    fields = unowned | (before.fields if before else frozenset())
    return [*rest, Manager(BEFORE_FIRST_APPLY, UPDATE, api_version, fields)]


def plan_apply(
    managers: list[Manager],
    name: str,
    api_version: str,
    time: str,
    old_spec: dict[str, Any],
    applied: dict[str, Any],
    *,
    force: bool,
) -> tuple[dict[str, Any], list[Manager]]:
    """The spec after ``name`` applies ``applied`` (top-level fields, nulls removed) to
    ``old_spec``, and the managers afterwards; raises the 409 on conflicts without ``force``.
    Nothing is changed here: the caller stores both only once the write is validated."""
    managers = _with_unowned(managers, old_spec, api_version)
    mine = next((m for m in managers if m.identity == (name, APPLY)), None)
    others = [m for m in managers if m is not mine]
    differing = {f for f, value in applied.items() if f not in old_spec or old_spec[f] != value}
    conflicts = [(m, f".spec.{f}") for m in others for f in sorted(m.fields & differing)]
    if conflicts and not force:
        raise apply_conflict(conflicts)
    others = [replace(m, fields=m.fields - differing) for m in others]
    new_spec = {**old_spec, **applied}
    shared = set().union(*(m.fields for m in others)) if others else set()
    for field in (mine.fields if mine else frozenset()) - applied.keys():
        if field not in shared:
            new_spec.pop(field, None)
    return new_spec, [*others, Manager(name, APPLY, api_version, frozenset(applied), time)]
