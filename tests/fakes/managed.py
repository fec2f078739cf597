"""``metadata.managedFields``, simplified: who set which field of an object, as kube-apiserver's field
manager records it, and the ownership rules server-side apply (``apply.py``) follows.

Every write through the API records its writer in the stored object's ``metadata.managedFields``:
one entry per (manager, operation, apiVersion, subresource) with ``time``, ``fieldsType: FieldsV1``
and ``fieldsV1``, sorted as the apiserver sorts them (operation, time, manager, apiVersion,
subresource). The manager of a create, update or non-apply patch is ``?fieldManager`` or, as the
apiserver defaults it, the User-Agent up to the first ``/``; its operation is ``Update``; a write to
``/status`` carries ``subresource: status``. ``pods/binding`` and ``put_object`` record nobody (as
the binding subresource and a direct write to etcd); the eviction handler's budget write is
``kube-apiserver``'s, on ``status``.

Fields are leaf paths of the JSON object: maps are walked key by key (labels and annotations one
by one), every list is one field (atomic; upstream merges lists of maps by key and sets by value,
so ``fieldsV1`` shows ``k:{...}`` / ``v:...`` entries the fake never writes), null values and empty
maps are no fields (except in an applied configuration: ``spec: {}`` makes its manager own
``.spec``); server-owned metadata (name, namespace, uid, resourceVersion, generation,
timestamps, managedFields) and ``apiVersion``/``kind`` are nobody's. A create gives the creator every
field but ``status``. An ``Update`` takes the fields it changes (sets, alters or removes) from every
other manager and keeps the ones it had; a removed field belongs to nobody; an entry left without
fields is dropped; its ``time`` moves only when its fields change, so a write that changes nothing
records nothing (same resourceVersion). Only the entries' identities are meant to match a real
server; ``fieldsV1`` is this simplified field set written out as ``{"f:spec": {"f:x": {}}}``.

A body's own ``managedFields``: absent or an empty list keep the stored ones (what a client that
drops them, as dra-extender does, sends); a non-empty list replaces them before this write's
changes are recorded (``[{}]`` clears them), as upstream allows.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "APPLY",
    "BEFORE_FIRST_APPLY",
    "UPDATE",
    "Entry",
    "FieldPath",
    "decode",
    "delete_path",
    "encode",
    "get_path",
    "leaves",
    "record_update",
    "set_path",
    "spec_owners",
    "text",
]

APPLY, UPDATE = "Apply", "Update"
#: The manager the apiserver gives the fields of an object first applied without managedFields.
BEFORE_FIRST_APPLY = "before-first-apply"
#: Metadata the server owns: never anyone's field.
SERVER_METADATA = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)

FieldPath = tuple[str, ...]
_MISSING = object()


@dataclass(frozen=True)
class Entry:
    """One ``managedFields`` entry with its fields decoded."""

    manager: str
    operation: str
    api_version: str
    fields: frozenset[FieldPath] = field(default_factory=frozenset)
    time: str | None = None
    subresource: str = ""

    @property
    def identity(self) -> tuple[str, str, str, str]:
        return self.manager, self.operation, self.api_version, self.subresource

    def describe(self) -> str:
        """As upstream's ``printManager`` names a manager in an apply conflict (the time is never
        part of a manager's identifier, so it is never printed)."""
        text = f'"{self.manager}"'
        if self.subresource:
            text += f' with subresource "{self.subresource}"'
        if self.operation == UPDATE:
            text += f" using {self.api_version}"
        return text


# --- field paths ----------------------------------------------------------------------------------


def _collect(path: FieldPath, value: Any, out: set[FieldPath], empty_maps: bool) -> None:
    if value is None:
        return
    if isinstance(value, dict):
        if not value and empty_maps:
            out.add(path)
        for key, item in value.items():
            _collect((*path, str(key)), item, out, empty_maps)
        return
    out.add(path)


def leaves(obj: dict[str, Any] | None, *, with_status: bool = True, empty_maps: bool = False) -> set[FieldPath]:
    """The fields of ``obj`` a writer can own (see the module docstring). ``empty_maps``: an empty
    map is a field too (an applied configuration's ``spec: {}`` is owned by its manager)."""
    out: set[FieldPath] = set()
    for key, value in (obj or {}).items():
        if key in ("apiVersion", "kind") or (key == "status" and not with_status):
            continue
        if key == "metadata":
            if isinstance(value, dict):
                for meta_key, meta_value in value.items():
                    if meta_key not in SERVER_METADATA:
                        _collect(("metadata", meta_key), meta_value, out, empty_maps)
            continue
        _collect((key,), value, out, empty_maps)
    return out


def get_path(obj: Any, path: FieldPath) -> Any:
    """The value at ``path`` (a sentinel when absent)."""
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def set_path(obj: dict[str, Any], path: FieldPath, value: Any) -> None:
    for part in path[:-1]:
        child = obj.get(part)
        if not isinstance(child, dict):
            child = obj[part] = {}
        obj = child
    obj[path[-1]] = copy.deepcopy(value)


def delete_path(obj: dict[str, Any], path: FieldPath) -> None:
    for part in path[:-1]:
        obj = obj.get(part)  # type: ignore[assignment]
        if not isinstance(obj, dict):
            return
    obj.pop(path[-1], None)


def text(path: FieldPath) -> str:
    """``.spec.holderIdentity``, as apply conflicts name a field."""
    return "".join(f".{part}" for part in path)


# --- entries ----------------------------------------------------------------------------------------


def _render(fields: Iterable[FieldPath]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(fields):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return tree


def _parse(tree: Any, prefix: FieldPath, out: set[FieldPath]) -> None:
    children = [k for k in tree if isinstance(k, str) and k != "."] if isinstance(tree, dict) else []
    named = [k for k in children if k.startswith("f:")]
    if not named or len(named) != len(children):  # a leaf, or keyed list members: the list is one field
        if prefix:
            out.add(prefix)
        return
    for key in named:
        _parse(tree[key], (*prefix, key[2:]), out)


def decode(entries: Any) -> list[Entry]:
    """``managedFields`` as ``Entry`` objects (malformed and manager-less entries dropped)."""
    result: list[Entry] = []
    for raw in entries if isinstance(entries, list) else ():
        if not isinstance(raw, dict) or not raw.get("manager"):
            continue
        fields: set[FieldPath] = set()
        _parse(raw.get("fieldsV1") or {}, (), fields)
        result.append(
            Entry(
                str(raw["manager"]),
                str(raw.get("operation") or UPDATE),
                str(raw.get("apiVersion") or ""),
                frozenset(fields),
                raw.get("time"),
                str(raw.get("subresource") or ""),
            )
        )
    return result


def encode(entries: Iterable[Entry]) -> list[dict[str, Any]]:
    """Entries with fields, as ``managedFields``, in the apiserver's order."""
    kept = sorted(
        (e for e in entries if e.fields),
        key=lambda e: (e.operation, e.time or "", e.manager, e.api_version, e.subresource),
    )
    out = []
    for entry in kept:
        raw: dict[str, Any] = {"manager": entry.manager, "operation": entry.operation, "apiVersion": entry.api_version}
        if entry.time:
            raw["time"] = entry.time
        raw["fieldsType"] = "FieldsV1"
        raw["fieldsV1"] = _render(entry.fields)
        if entry.subresource:
            raw["subresource"] = entry.subresource
        out.append(raw)
    return out


def base_entries(old: dict[str, Any] | None, given: Any) -> list[Entry]:
    """The entries a write starts from: the body's own non-empty list, else the stored ones."""
    stored = ((old or {}).get("metadata") or {}).get("managedFields")
    if isinstance(given, list) and given and given != stored:
        return decode(given)
    return decode(stored)


def record_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    *,
    manager: str,
    api_version: str,
    time: str,
    subresource: str = "",
    given: Any = None,
) -> list[dict[str, Any]]:
    """``new``'s managedFields after ``manager`` wrote it over ``old`` (None: a create); ``given``:
    the managedFields the request's body carried."""
    entries = base_entries(old, given)
    before = leaves(old) if old is not None else set()
    after = leaves(new, with_status=old is not None)
    changed = {p for p in before | after if get_path(old, p) != get_path(new, p)} if old is not None else after
    removed = frozenset(before - after)
    identity = (manager, UPDATE, api_version, subresource)
    result: list[Entry] = []
    mine: Entry | None = None
    for entry in entries:
        if entry.identity == identity:
            mine = entry
        else:
            result.append(replace(entry, fields=entry.fields - changed - removed))
    owned = (mine.fields if mine else frozenset()) - removed
    fields = owned | frozenset(changed - removed)
    if mine is None or fields != mine.fields:
        mine = Entry(manager, UPDATE, api_version, fields, time, subresource)
    result.append(mine)
    return encode(result)


def spec_owners(obj: dict[str, Any]) -> dict[str, list[str]]:
    """{manager (``"name (Update)"`` for Update managers): sorted top-level spec fields}."""
    owners: dict[str, list[str]] = {}
    for entry in decode((obj.get("metadata") or {}).get("managedFields")):
        spec = sorted({p[1] for p in entry.fields if len(p) > 1 and p[0] == "spec"})
        if spec:
            owners[entry.manager if entry.operation == APPLY else f"{entry.manager} ({UPDATE})"] = spec
    return owners
