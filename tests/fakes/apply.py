"""Server-side apply, simplified, for the types whose ``ResourceType.apply`` is set
(PodSchedulingContext: 1.31's scheduler and drivers write the context's spec this way; Lease).

The request: ``PATCH`` of the object's URL with ``Content-Type: application/apply-patch+yaml``,
``?fieldManager=NAME`` (required, checked before anything else: 422 ``PatchOptions.meta.k8s.io ""
is invalid: fieldManager: Required value: is required for apply patch``) and optionally
``?force=true``. The body is the applied configuration, JSON or YAML, with ``apiVersion`` and
``kind``.

Ownership is ``metadata.managedFields`` (``managed.py``: leaf fields, lists atomic). What an apply
does (a simplification of structured-merge-diff; tests may rely on exactly this):

- A manager is (name, operation, apiVersion, subresource); an apply is ``Apply`` by its
  ``fieldManager``. The fields of a stored object that has no managedFields at all (written with
  ``put_object``) belong to ``before-first-apply`` (Update) when it is first applied, as upstream.
- Object absent: the configuration creates it (metadata as given: name, labels, annotations,
  ownerReferences, finalizers; status dropped; validated as a POST); answer 201.
- Object present: every field of the configuration replaces the stored one (lists whole: no set or
  map merging of ``potentialNodes``); ``null`` values count as omitted; a field this manager applied
  before and omits now is removed, unless another manager owns it too. ``status`` is ignored (use
  the status subresource). ``metadata.resourceVersion`` / ``uid`` in the configuration are
  preconditions (409 when stale).
- Conflict: a configured field whose value differs from the stored one and that another manager
  owns is a 409 ``Apply failed with 1 conflict: conflict with "other": .spec.selectedNode``
  (several: ``Apply failed with N conflicts: conflicts with "other":\\n- .spec.a``, as upstream;
  an Update manager is ``"name" using apiVersion``); ``force=true`` takes such fields over instead.
  The same value is shared ownership, no conflict.
- An apply that changes neither the object nor its ownership writes nothing (same
  resourceVersion, no watch event); one that changes only ownership is a write, as upstream.
- Apply to other kinds, or to the ``status`` subresource, is 415.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import orjson
import yaml

from .managed import (
    APPLY,
    BEFORE_FIRST_APPLY,
    UPDATE,
    Entry,
    decode,
    delete_path,
    encode,
    get_path,
    leaves,
    set_path,
    text,
)
from .status import ApiError, FieldError, bad_request, invalid, status_body

__all__ = [
    "APPLY_PATCH",
    "apply_conflict",
    "default_manager",
    "missing_field_manager",
    "parse_apply_body",
    "plan_apply",
]

APPLY_PATCH = "application/apply-patch+yaml"


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


def apply_conflict(conflicts: list[tuple[Entry, str]]) -> ApiError:
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


def plan_apply(
    old: dict[str, Any],
    config: dict[str, Any],
    *,
    manager: str,
    api_version: str,
    time: str,
    force: bool,
) -> dict[str, Any]:
    """``old`` after ``manager`` applies ``config`` (status and server metadata ignored, nulls
    omitted), with its managedFields; raises the 409 on conflicts without ``force``. ``old`` is not
    changed: the caller stores the result only once it is validated."""
    entries = decode((old.get("metadata") or {}).get("managedFields"))
    if not entries:
        entries = [Entry(BEFORE_FIRST_APPLY, UPDATE, api_version, frozenset(leaves(old, with_status=False)))]
    applied = leaves(config, with_status=False, empty_maps=True)
    identity = (manager, APPLY, api_version, "")
    mine = next((e for e in entries if e.identity == identity), None)
    others = [e for e in entries if e is not mine]
    differing = {p for p in applied if get_path(old, p) != get_path(config, p)}
    conflicts = [(e, text(p)) for e in others for p in sorted(e.fields & differing)]
    if conflicts and not force:
        raise apply_conflict(conflicts)
    others = [replace(e, fields=e.fields - differing) for e in others]
    new = copy.deepcopy(old)
    for path in sorted(applied):
        value = get_path(config, path)
        if not (isinstance(value, dict) and isinstance(get_path(new, path), dict)):  # an applied {} merges
            set_path(new, path, value)
    kept = set().union(*(e.fields for e in others)) if others else set()
    for path in sorted((mine.fields if mine else frozenset()) - applied, key=len, reverse=True):
        # a field another manager owns stays, and so does a map holding one
        if not any(owned[: len(path)] == path for owned in kept):
            delete_path(new, path)
    fields = frozenset(applied)
    if mine is None or mine.fields != fields:
        mine = Entry(manager, APPLY, api_version, fields, time)
    new.setdefault("metadata", {})["managedFields"] = encode([*others, mine])
    return new
