"""What the apiserver does with a request once it knows the resource: the REST semantics.

``Registry`` turns verbs into storage commits the way kube-apiserver's generic registry and the
per-type strategies do: system metadata set on create (uid, creationTimestamp, generation), the
optimistic-concurrency preconditions of update (409 Conflict on a stale resourceVersion, 422 when
it is missing), ``status`` taken only through the status subresource, finalizers delaying
deletion, the ``pods/binding`` and ``pods/eviction`` subresources (eviction with its
PodDisruptionBudget rules in ``disruption.py``), LIST paging with consistent ``continue`` tokens and
the initial part of WATCH. Errors are ``ApiError`` carrying the real Status body.

Per-type strategy parts live with their rules: validation in ``validation.py``, the fields the
DRAControlPlaneController gate drops in v1alpha3 writes in ``classic.py``, server-side apply and
field ownership in ``apply.py``. PodSchedulingContext (STR131): create clears the status, a
main-resource write keeps the stored status, a ``/status`` write keeps spec and metadata, and
updates without a resourceVersion are allowed.

Garbage collection, simplified: when a Pod is removed for good (deleted without finalizers, or its
last finalizer removed), the PodSchedulingContexts and ResourceClaims of its namespace whose
``ownerReferences`` name the pod's uid with ``controller: true`` are deleted at once, in the same
step (kube-controller-manager's garbage collector does this asynchronously, in background
propagation); those with finalizers get ``deletionTimestamp`` as any delete. ``collect_garbage``
does the same for dependents whose controlling pod is already gone. Other owners, kinds and
``blockOwnerDeletion`` are not emulated.

Versions: each object is stored as written, with the ``apiVersion`` of the URL that wrote it. It
is served under another version only when the JSON shapes are identical (resource.k8s.io v1 and
v1beta2: only ``apiVersion`` is rewritten); any other cross-version read is a loud 500 from the
fake (real conversion is out of scope), never a silent mis-shaped object.
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from . import status as st
from .apply import APPLY, FieldOwners, Manager, plan_apply, spec_of, updated_owners
from .classic import drop_disabled_fields
from .disruption import check_pdb_spec, check_pdb_status, evict
from .resources import CATALOG, RESOURCE_GROUP, ResourceType, shape_family
from .selectors import Selector, match_all
from .status import FieldError
from .storage import Change, Key, Storage
from .validation import (
    CLASSIC_VERSION,
    check_claim_spec,
    check_claim_status,
    check_immutable_spec,
    check_metadata,
    check_name,
    check_no_new_finalizers,
    check_pod_scheduling_spec,
    check_pod_scheduling_status,
)

__all__ = ["ListOptions", "Registry", "now_timestamp", "resource_for_kind"]

#: Metadata a client may set; everything else in metadata belongs to the server.
USER_METADATA = ("labels", "annotations", "finalizers", "ownerReferences", "generateName")
#: Metadata the server sets and keeps across updates.
SYSTEM_METADATA = ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds")
#: The kinds the fake's garbage collector deletes with their controlling pod.
_DEPENDENT_TYPES = tuple(
    rt for rt in CATALOG if rt.group == RESOURCE_GROUP and rt.kind in ("PodSchedulingContext", "ResourceClaim")
)
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the remainder "
    "of the results. Continuing with the provided token results in an inconsistent list - objects that were "
    "created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
)


def now_timestamp() -> str:
    """``metav1.Time`` now: seconds, UTC, ``Z``."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def resource_for_kind(kind: str, group: str | None = None) -> ResourceType:
    """The catalog entry of a Kind (core group first when the Kind exists in several groups)."""
    for rt in CATALOG:
        if rt.kind == kind and (group is None or rt.group == group):
            return rt
    raise KeyError(f"the fake serves no kind {kind!r}" + (f" in group {group!r}" if group else ""))


@dataclass(frozen=True)
class ListOptions:
    """The LIST/WATCH query parameters the fake understands."""

    resource_version: str = ""
    resource_version_match: str = ""
    limit: int = 0
    continue_token: str = ""
    selector: Selector = match_all
    label_selector: str = ""
    field_selector: str = ""


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _without_rv(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {k: v for k, v in _meta(obj).items() if k != "resourceVersion"}}


def _prune_metadata(meta: dict[str, Any]) -> dict[str, Any]:
    """Empty maps and lists are omitted, as the apiserver's JSON (``omitempty``) does."""
    return {k: v for k, v in meta.items() if v not in (None, {}, [], "")}


class Registry:
    """REST semantics over ``Storage``; see the module docstring."""

    def __init__(
        self,
        storage: Storage,
        *,
        clock: Callable[[], str] = now_timestamp,
        rng: random.Random | None = None,
        unconditional_updates: bool = False,
        classic: bool = False,
    ) -> None:
        self.storage = storage
        self.clock = clock
        self.rng = rng or random.Random()
        #: When False (strict default), an update without metadata.resourceVersion is 422 Invalid,
        #: as for kinds whose strategy forbids unconditional updates. The real strategies of the
        #: kinds served here mostly allow them; a correct client always sends one anyway. Types
        #: whose ``unconditional_update`` is set (PodSchedulingContext) always allow them.
        self.unconditional_updates = unconditional_updates
        #: The DRAControlPlaneController gate: when False, v1alpha3 writes lose the gated fields.
        self.classic = classic
        #: Spec field ownership of the types with server-side apply (``apply.py``).
        self.owners = FieldOwners()

    # --- versions -------------------------------------------------------------------------------

    def serve(self, rt: ResourceType, version: str, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` as the URL's version presents it (see the module docstring)."""
        want = rt.api_version(version)
        have = obj.get("apiVersion")
        if have == want:
            return obj
        have_version = str(have).rpartition("/")[2]
        if rt.group != RESOURCE_GROUP or shape_family(rt.group, have_version) == shape_family(rt.group, version):
            return {**obj, "apiVersion": want}
        meta = _meta(obj)
        where = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else meta.get("name")
        raise st.internal_error(
            f"fake apiserver: {rt.kind} {where} is stored as {have} and cannot be served as {want} "
            "(conversion between these resource.k8s.io versions is not emulated)"
        )

    # --- reads ----------------------------------------------------------------------------------

    def get(self, rt: ResourceType, version: str, namespace: str, name: str) -> dict[str, Any]:
        obj = self.storage.get((rt.group, rt.plural), (namespace, name))
        if obj is None:
            raise st.not_found(rt.plural, rt.group, name)
        return self.serve(rt, version, obj)

    def list_collection(self, rt: ResourceType, version: str, namespace: str, options: ListOptions) -> dict[str, Any]:
        """LIST with paging. Items carry no ``kind``/``apiVersion``, as in real list bodies."""
        snapshot_rv, start, paged = self._list_point(options)
        objects = self.storage.snapshot((rt.group, rt.plural), snapshot_rv)
        keys = sorted(
            key
            for key, obj in objects.items()
            if (not namespace or key[0] == namespace) and key > start and options.selector(obj)
        )
        metadata: dict[str, Any] = {"resourceVersion": str(snapshot_rv)}
        if paged and options.limit > 0 and len(keys) > options.limit:
            remaining = len(keys) - options.limit
            keys = keys[: options.limit]
            metadata["continue"] = _encode_continue(snapshot_rv, keys[-1])
            if options.selector is match_all:
                metadata["remainingItemCount"] = remaining
        items = []
        for key in keys:
            served = self.serve(rt, version, objects[key])
            items.append({k: v for k, v in served.items() if k not in ("kind", "apiVersion")})
        return {"kind": f"{rt.kind}List", "apiVersion": rt.api_version(version), "metadata": metadata, "items": items}

    def _list_point(self, options: ListOptions) -> tuple[int, Key, bool]:
        """(resourceVersion to read at, key to start after, whether ``limit`` applies)."""
        rv, match = options.resource_version, options.resource_version_match
        if options.continue_token:
            if rv:
                raise st.bad_request("specifying resource version is not allowed when using continue")
            snapshot_rv, start = _decode_continue(options.continue_token)
            self.storage.check_not_compacted(snapshot_rv, _CONTINUE_TOO_OLD)
            return snapshot_rv, start, True
        _check_match(rv, match)
        if rv == "":
            return self.storage.rv, ("", ""), True
        if rv == "0":
            # Served from the watch cache, which ignores limit: one page, no continue token.
            return self.storage.rv, ("", ""), False
        wanted = _parse_rv(rv)
        if wanted > self.storage.rv:
            raise st.timeout(f"Too large resource version: {wanted}, current: {self.storage.rv}")
        # Legacy rule: a non-zero resourceVersion with a limit and no match means Exact.
        if match == "Exact" or (match == "" and options.limit > 0):
            return wanted, ("", ""), True
        return self.storage.rv, ("", ""), True

    def watch_start(
        self, rt: ResourceType, namespace: str, options: ListOptions, *, send_initial_events: bool, bookmarks: bool
    ) -> tuple[list[tuple[str, dict[str, Any]]], int]:
        """The events a new watch begins with, and the resourceVersion live events follow.

        ``resourceVersion`` unset or "0": synthetic ADDED for every current object, then live.
        ``N``: replay of the changes after N (410 Expired if compacted; becomes an ERROR event).
        ``sendInitialEvents=true``: ADDED for everything, then a BOOKMARK annotated
        ``k8s.io/initial-events-end`` (needs allowWatchBookmarks and resourceVersionMatch=NotOlderThan).
        """
        rv, match = options.resource_version, options.resource_version_match
        collection = (rt.group, rt.plural)
        if send_initial_events:
            if match != "NotOlderThan" or not bookmarks:
                raise st.invalid(
                    "ListOptions",
                    "meta.k8s.io",
                    "",
                    [
                        st.FieldError(
                            "sendInitialEvents",
                            "FieldValueForbidden",
                            "Forbidden: sendInitialEvents is forbidden for watch unless resourceVersionMatch is set to "
                            "NotOlderThan and allowWatchBookmarks is true",
                        )
                    ],
                )
        elif match:
            raise st.invalid(
                "ListOptions",
                "meta.k8s.io",
                "",
                [
                    st.FieldError(
                        "resourceVersionMatch",
                        "FieldValueForbidden",
                        "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    )
                ],
            )
        if send_initial_events or rv in ("", "0"):
            current = self.storage.current(collection)
            events = [
                ("ADDED", current[key])
                for key in sorted(current)
                if (not namespace or key[0] == namespace) and options.selector(current[key])
            ]
            return events, self.storage.rv
        since = _parse_rv(rv)
        events = []
        for change in self.storage.changes_since(collection, since):
            if namespace and change.key[0] != namespace:
                continue
            event = watch_event(change, options.selector)
            if event is not None:
                events.append(event)
        return events, max(since, self.storage.rv)

    # --- writes ---------------------------------------------------------------------------------

    def create(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        body: Any,
        *,
        manager: str | None = None,
        operation: str = "Update",
    ) -> dict[str, Any]:
        """POST: a new object with server-set metadata; status reset where a status subresource
        exists (as the strategies' PrepareForCreate). ``manager`` (with ``operation``) owns the
        spec fields afterwards, for the types with server-side apply."""
        obj = self._check_body(rt, version, namespace, body)
        self._drop_disabled(rt, version, obj, None)
        meta = _meta(obj)
        if meta.get("resourceVersion"):
            raise st.internal_error("resourceVersion should not be set on objects to be created")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = str(meta["generateName"]) + "".join(self.rng.choice(_NAME_ALPHABET) for _ in range(5))
        name = meta.get("name")
        errors = check_name(name) + check_metadata(meta) + _object_errors(rt, version, obj)
        if errors:
            raise st.invalid(rt.kind, rt.group, str(name or ""), errors)
        if rt.namespaced and self.storage.get(("", "namespaces"), ("", namespace)) is None:
            raise st.not_found("namespaces", "", namespace)
        collection, key = (rt.group, rt.plural), (namespace, str(name))
        if self.storage.get(collection, key) is not None:
            raise st.already_exists(rt.plural, rt.group, str(name))
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds", "generation", "uid", "creationTimestamp"):
            meta.pop(field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self.clock()
        if rt.generation:
            meta["generation"] = 1
        obj["metadata"] = _prune_metadata(meta)
        _reset_status_on_create(rt, obj)
        created = self.storage.commit(collection, key, obj)
        if rt.apply and manager is not None:
            fields = frozenset(spec_of(created))
            self.owners.set(meta["uid"], [Manager(manager, operation, rt.api_version(version), fields, self.clock())])
        return created

    def update(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        manager: str | None = None,
    ) -> dict[str, Any]:
        """PUT of the object (status ignored when a status subresource exists) or of ``status``
        (only status taken), guarded by resourceVersion and uid. ``manager`` takes the spec fields
        a main-resource write changes, for the types with server-side apply."""
        new_in = self._check_body(rt, version, namespace, body)
        meta_in = _meta(new_in)
        if meta_in.get("name") != name:
            raise st.bad_request(
                f"the name of the object ({meta_in.get('name')}) does not match the name on the URL ({name})"
            )
        old = self._existing(rt, namespace, name)
        self.serve(rt, version, old)  # refuses writes across non-identical versions
        self._check_preconditions(rt, old, meta_in)
        if subresource == "status":
            self._drop_disabled(rt, version, new_in, old, parts="status")
            new = {**old, "apiVersion": rt.api_version(version)}
            if new_in.get("status"):
                new["status"] = new_in["status"]
            else:
                new.pop("status", None)
            errors = _status_errors(rt, version, old, new)
        else:
            self._drop_disabled(rt, version, new_in, old)
            new = self._merge_main(rt, version, old, new_in)
            errors = self._main_errors(rt, version, old, new)
        if errors:
            raise st.invalid(rt.kind, rt.group, name, errors)
        stored = self._commit_update(rt, old, new)
        if rt.apply and manager is not None and not subresource:
            uid = str(_meta(old).get("uid"))
            owners = updated_owners(
                self.owners.managers(uid), manager, rt.api_version(version), self.clock(), spec_of(old), spec_of(new)
            )
            self.owners.set(uid, owners)
        return stored

    def apply(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        body: Any,
        *,
        manager: str,
        force: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        """Server-side apply of ``body`` by ``manager`` (see ``apply.py``); (stored object,
        whether it was created)."""
        if not isinstance(body, dict):
            raise st.bad_request("the applied configuration must be an object")
        for field in ("apiVersion", "kind"):
            if not body.get(field):
                raise st.bad_request(f"the applied configuration must set {field}")
        config = self._check_body(rt, version, namespace, body)
        meta = _meta(config)
        if meta.get("name") not in (None, "", name):
            raise st.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        meta["name"] = name
        config.pop("status", None)
        spec = config.get("spec")
        if spec is not None and not isinstance(spec, dict):
            raise st.bad_request("spec of the applied configuration must be an object")
        applied = {k: v for k, v in (spec or {}).items() if v is not None}
        old = self.storage.get((rt.group, rt.plural), (namespace, name))
        if old is None:
            if meta.get("resourceVersion"):
                raise st.conflict(rt.plural, rt.group, name, st.MODIFIED)
            if spec is not None:
                config["spec"] = applied
            return self.create(rt, version, namespace, config, manager=manager, operation=APPLY), True
        self.serve(rt, version, old)
        self._check_apply_preconditions(rt, old, meta)
        uid, api_version = str(_meta(old).get("uid")), rt.api_version(version)
        new_spec, owners = plan_apply(
            self.owners.managers(uid), manager, api_version, self.clock(), spec_of(old), applied, force=force
        )
        new = self._merge_applied(rt, version, old, config, new_spec)
        self._drop_disabled(rt, version, new, old)
        errors = self._main_errors(rt, version, old, new)
        if errors:
            raise st.invalid(rt.kind, rt.group, name, errors)
        stored = self._commit_update(rt, old, new)
        self.owners.set(uid, owners)
        return stored, False

    def patch(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        content_type: str,
        patch: Any,
        *,
        subresource: str = "",
        manager: str | None = None,
    ) -> dict[str, Any]:
        """PATCH: the patch is applied to the current object in the URL's version, then written
        like an update. A resourceVersion in the patched result acts as a precondition; without
        one the write is unconditional (the apiserver retries patches on its own conflicts)."""
        from .patches import apply_patch

        old = self._existing(rt, namespace, name)
        current = self.serve(rt, version, old)
        patched = apply_patch(content_type, copy.deepcopy(current), patch)
        meta = _meta(patched)
        if meta.get("name") != name:
            raise st.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        if not meta.get("resourceVersion"):
            meta["resourceVersion"] = _meta(old).get("resourceVersion")
            patched["metadata"] = meta
        return self.update(rt, version, namespace, name, patched, subresource=subresource, manager=manager)

    def delete(self, rt: ResourceType, namespace: str, name: str, options: Any) -> dict[str, Any]:
        """DELETE: preconditions from DeleteOptions; with finalizers only ``deletionTimestamp`` is
        set (generation bumped) and the object stays until its last finalizer is removed."""
        old = self._existing(rt, namespace, name)
        preconditions = (options.get("preconditions") or {}) if isinstance(options, dict) else {}
        meta = _meta(old)
        if preconditions.get("uid") and preconditions["uid"] != meta.get("uid"):
            raise st.conflict(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: UID in precondition: {preconditions['uid']}, "
                f"UID in object meta: {meta.get('uid')}",
            )
        if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != meta.get("resourceVersion"):
            raise st.conflict(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: ResourceVersion in precondition: {preconditions['resourceVersion']}, "
                f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
            )
        return self.remove(rt, namespace, name)

    def remove(self, rt: ResourceType, namespace: str, name: str, *, force: bool = False) -> dict[str, Any]:
        """Delete now (no finalizers, or ``force``) or mark as being deleted."""
        old = self._existing(rt, namespace, name)
        collection, key, meta = (rt.group, rt.plural), (namespace, name), _meta(old)
        if force or not meta.get("finalizers"):
            removed = self.storage.commit(collection, key, None)
            self._after_removal(rt, removed)
            return removed
        if meta.get("deletionTimestamp"):
            return old
        new_meta = {**meta, "deletionTimestamp": self.clock(), "deletionGracePeriodSeconds": 0}
        if rt.generation:
            new_meta["generation"] = int(meta.get("generation") or 0) + 1
        return self.storage.commit(collection, key, {**old, "metadata": new_meta})

    def bind(self, namespace: str, name: str, body: Any) -> dict[str, Any]:
        """``POST pods/NAME/binding``: set ``spec.nodeName`` and PodScheduled=True once."""
        if not isinstance(body, dict) or body.get("kind") not in (None, "Binding"):
            raise st.bad_request("expected a Binding object")
        meta = _meta(body)
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise st.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        if meta.get("name") != name:
            raise st.bad_request("name in URL does not match name in Binding object")
        target: dict[str, Any] = body["target"] if isinstance(body.get("target"), dict) else {}
        errors = []
        if target.get("kind") not in (None, "", "Node"):
            errors.append(
                st.FieldError(
                    "target.kind",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{target.get("kind")}": supported values: "Node", ""',
                )
            )
        if not target.get("name"):
            errors.append(st.FieldError("target.name", "FieldValueRequired", "Required value"))
        if errors:
            raise st.invalid("Binding", "", name, errors)
        pods = resource_for_kind("Pod")
        pod = self.storage.get(("", "pods"), (namespace, name))
        if pod is None:
            raise st.not_found("pods", "", name)
        pod_meta, node = _meta(pod), target["name"]
        if meta.get("uid") and meta["uid"] != pod_meta.get("uid"):
            raise st.conflict(
                "pods/binding",
                "",
                name,
                f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: {pod_meta.get('uid')}",
            )
        if pod_meta.get("deletionTimestamp"):
            raise st.conflict("pods/binding", "", name, f"pod {name} is being deleted, cannot be assigned to a host")
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            raise st.conflict("pods/binding", "", name, f'pod {name} is already assigned to node "{bound}"')
        new = copy.deepcopy(pod)
        new.setdefault("spec", {})["nodeName"] = node
        if meta.get("annotations"):
            new["metadata"]["annotations"] = {**(new["metadata"].get("annotations") or {}), **meta["annotations"]}
        status = new.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"]
        conditions.append(
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": self.clock()}
        )
        status["conditions"] = conditions
        self.storage.commit((pods.group, pods.plural), (namespace, name), new)
        return st.success(201)

    def evict(self, namespace: str, name: str, body: Any) -> dict[str, Any]:
        """``POST pods/NAME/eviction``: PodDisruptionBudgets checked and spent, then the pod deleted
        like a DELETE (``disruption.py``). Returns the Success Status."""
        return evict(self, namespace, name, body)

    def put(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Direct write for tests (no admission, no validation): create or replace the whole
        object, status included, keeping uid and creationTimestamp of an existing one."""
        obj = copy.deepcopy(raw)
        group, _, version = str(obj.get("apiVersion") or "").rpartition("/")
        rt = resource_for_kind(str(obj.get("kind")), group)
        if version not in rt.versions:
            raise ValueError(f"{rt.kind} has no version {version!r} in the fake")
        meta = dict(_meta(obj))
        if not meta.get("name"):
            raise ValueError("metadata.name is required")
        namespace = (meta.get("namespace") or "default") if rt.namespaced else ""
        if rt.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        collection, key = (rt.group, rt.plural), (namespace, meta["name"])
        old = self.storage.get(collection, key)
        if old is None:
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", self.clock())
            if rt.generation:
                meta.setdefault("generation", 1)
        else:
            for field in ("uid", "creationTimestamp"):
                meta[field] = _meta(old).get(field)
            if rt.generation and "generation" not in meta:
                bump = obj.get("spec") != old.get("spec")
                meta["generation"] = int(_meta(old).get("generation") or 1) + (1 if bump else 0)
        meta.pop("resourceVersion", None)
        obj["metadata"] = meta
        return self.storage.commit(collection, key, obj)

    def collect_garbage(self) -> int:
        """Delete (see ``remove``) every PodSchedulingContext and ResourceClaim whose controlling
        owner reference names a Pod uid that no longer exists in its namespace. Returns how many
        were deleted or marked."""
        live = {
            (str(_meta(p).get("namespace")), str(_meta(p).get("uid")))
            for p in self.storage.current(("", "pods")).values()
        }
        count = 0
        for rt in _DEPENDENT_TYPES:
            for (namespace, name), obj in list(self.storage.current((rt.group, rt.plural)).items()):
                owner = _controlling_pod_uid(obj)
                if owner is not None and (namespace, owner) not in live and not _meta(obj).get("deletionTimestamp"):
                    self.remove(rt, namespace, name)
                    count += 1
        return count

    # --- helpers --------------------------------------------------------------------------------

    def _after_removal(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        """An object is gone for good: forget its field owners; a pod's dependents go with it."""
        meta = _meta(obj)
        if rt.apply:
            self.owners.forget(str(meta.get("uid")))
        if rt.kind == "Pod" and not rt.group:
            self._collect_dependents(str(meta.get("namespace") or ""), str(meta.get("uid")))

    def _collect_dependents(self, namespace: str, uid: str) -> None:
        for rt in _DEPENDENT_TYPES:
            for (obj_namespace, name), obj in list(self.storage.current((rt.group, rt.plural)).items()):
                if obj_namespace == namespace and _controlling_pod_uid(obj) == uid:
                    self.remove(rt, namespace, name)

    def _drop_disabled(
        self, rt: ResourceType, version: str, new: dict[str, Any], old: dict[str, Any] | None, *, parts: str = ""
    ) -> None:
        if version == CLASSIC_VERSION and rt.group == RESOURCE_GROUP and not self.classic:
            drop_disabled_fields(rt.kind, new, old, parts=parts)

    def _main_errors(
        self, rt: ResourceType, version: str, old: dict[str, Any], new: dict[str, Any]
    ) -> list[FieldError]:
        """Validation of a main-resource write (update, patch, apply) of ``old`` into ``new``."""
        errors = check_metadata(_meta(new)) + check_no_new_finalizers(_meta(old), _meta(new))
        errors += check_immutable_spec(rt.kind, old, new)
        if rt.kind == "PodSchedulingContext":
            errors += check_pod_scheduling_spec(new)
        if rt.kind == "PodDisruptionBudget":
            errors += check_pdb_spec(new)
        return errors

    def _check_apply_preconditions(self, rt: ResourceType, old: dict[str, Any], meta: dict[str, Any]) -> None:
        """resourceVersion and uid in an applied configuration are preconditions; both optional."""
        old_meta, name = _meta(old), str(_meta(old).get("name"))
        if meta.get("resourceVersion") and meta["resourceVersion"] != old_meta.get("resourceVersion"):
            raise st.conflict(rt.plural, rt.group, name, st.MODIFIED)
        if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
            raise st.conflict(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: {old_meta.get('uid')}",
            )

    def _merge_applied(
        self, rt: ResourceType, version: str, old: dict[str, Any], config: dict[str, Any], spec: dict[str, Any]
    ) -> dict[str, Any]:
        """The stored object after an apply: ``spec`` as planned, labels and annotations merged,
        ownerReferences and finalizers replaced when configured, everything else as stored."""
        new = copy.deepcopy(old)
        new["apiVersion"] = rt.api_version(version)
        if spec or "spec" in old:
            new["spec"] = spec
        meta, config_meta = dict(_meta(new)), _meta(config)
        for field in ("labels", "annotations"):
            if isinstance(config_meta.get(field), dict):
                meta[field] = {**(meta.get(field) or {}), **config_meta[field]}
        for field in ("ownerReferences", "finalizers"):
            if field in config_meta:
                meta[field] = config_meta[field]
        if rt.generation and new.get("spec") != old.get("spec"):
            meta["generation"] = int(_meta(old).get("generation") or 1) + 1
        new["metadata"] = _prune_metadata(meta)
        return new

    def _existing(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        obj = self.storage.get((rt.group, rt.plural), (namespace, name))
        if obj is None:
            raise st.not_found(rt.plural, rt.group, name)
        return obj

    def _check_body(self, rt: ResourceType, version: str, namespace: str, body: Any) -> dict[str, Any]:
        """The decoded body as the apiserver's decoder accepts it for this URL: a JSON object whose
        apiVersion/kind (when present) match, with a namespace matching the URL's."""
        if not isinstance(body, dict):
            raise st.bad_request("the body of the request must be a JSON object")
        want = rt.api_version(version)
        if body.get("apiVersion") not in (None, "", want):
            raise st.bad_request(
                f"the API version in the data ({body['apiVersion']}) does not match the expected API version ({want})"
            )
        if body.get("kind") not in (None, "", rt.kind):
            raise st.bad_request(f"the kind in the data ({body['kind']}) does not match the expected kind ({rt.kind})")
        obj = copy.deepcopy(body)
        obj["apiVersion"], obj["kind"] = want, rt.kind
        meta = obj.get("metadata")
        if meta is None:
            meta = {}
        if not isinstance(meta, dict):
            raise st.bad_request("metadata must be an object")
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise st.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        obj["metadata"] = meta
        return obj

    def _check_preconditions(self, rt: ResourceType, old: dict[str, Any], meta_in: dict[str, Any]) -> None:
        name, old_meta = str(_meta(old).get("name")), _meta(old)
        version = meta_in.get("resourceVersion")
        if not version:
            if not (self.unconditional_updates or rt.unconditional_update):
                raise st.invalid(
                    rt.kind,
                    rt.group,
                    name,
                    [
                        st.FieldError(
                            "metadata.resourceVersion",
                            "FieldValueInvalid",
                            "Invalid value: 0x0: must be specified for an update",
                        )
                    ],
                )
        elif version != old_meta.get("resourceVersion"):
            raise st.conflict(rt.plural, rt.group, name, st.MODIFIED)
        uid = meta_in.get("uid")
        if uid and uid != old_meta.get("uid"):
            raise st.conflict(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {old_meta.get('uid')}",
            )

    def _merge_main(
        self, rt: ResourceType, version: str, old: dict[str, Any], new_in: dict[str, Any]
    ) -> dict[str, Any]:
        """The object a main-resource PUT stores: the body, with server-owned metadata from the
        stored object and (with a status subresource) the stored status."""
        new = {**new_in, "apiVersion": rt.api_version(version)}
        meta_in, old_meta = _meta(new_in), _meta(old)
        meta = {k: v for k, v in old_meta.items() if k not in USER_METADATA}
        for field in USER_METADATA:
            if field in meta_in:
                meta[field] = meta_in[field]
        if rt.generation and new.get("spec") != old.get("spec"):
            meta["generation"] = int(old_meta.get("generation") or 1) + 1
        new["metadata"] = _prune_metadata(meta)
        if rt.status:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        return new

    def _commit_update(self, rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        """Commit unless nothing changed (then the stored object comes back, same resourceVersion,
        no watch event); an object being deleted whose last finalizer went is removed."""
        if _without_rv(new) == _without_rv(old):
            return old
        meta, key = _meta(new), (str(_meta(old).get("namespace") or ""), str(_meta(old)["name"]))
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            removed = self.storage.commit((rt.group, rt.plural), key, None, final=new)
            self._after_removal(rt, removed)
            return removed
        return self.storage.commit((rt.group, rt.plural), key, new)


def watch_event(change: Change, selector: Selector) -> tuple[str, dict[str, Any]] | None:
    """The event a filtered watch sees for a change: an object entering the selection is ADDED,
    one leaving it is DELETED (with its new state), as the watch cache does."""
    if change.type == "DELETED":
        return ("DELETED", change.obj) if selector(change.obj) else None
    now = selector(change.obj)
    before = change.prev is not None and selector(change.prev)
    if now and before:
        return ("MODIFIED", change.obj)
    if now:
        return ("ADDED", change.obj)
    if before:
        return ("DELETED", change.obj)
    return None


def _controlling_pod_uid(obj: dict[str, Any]) -> str | None:
    """The uid in the object's controller owner reference when that owner is a core v1 Pod."""
    for ref in _meta(obj).get("ownerReferences") or ():
        if (
            isinstance(ref, dict)
            and ref.get("controller") is True
            and ref.get("kind") == "Pod"
            and ref.get("apiVersion") in (None, "", "v1")
            and ref.get("uid")
        ):
            return str(ref["uid"])
    return None


def _object_errors(rt: ResourceType, version: str, obj: dict[str, Any]) -> list[FieldError]:
    """Kind-specific validation of a new object."""
    if rt.kind == "PodSchedulingContext":
        return check_pod_scheduling_spec(obj)
    if rt.kind == "ResourceClaim":
        return check_claim_spec(version, obj)
    if rt.kind == "PodDisruptionBudget":
        return check_pdb_spec(obj)
    return []


def _status_errors(rt: ResourceType, version: str, old: dict[str, Any], new: dict[str, Any]) -> list[FieldError]:
    """Kind-specific validation of a status write."""
    if rt.kind == "ResourceClaim":
        return check_claim_status(old, new.get("status") or {}, version=version)
    if rt.kind == "PodSchedulingContext":
        return check_pod_scheduling_status(new.get("status"))
    if rt.kind == "PodDisruptionBudget":
        return check_pdb_status(new.get("status"))
    return []


def _reset_status_on_create(rt: ResourceType, obj: dict[str, Any]) -> None:
    if rt.kind in ("ResourceClaim", "PodSchedulingContext"):
        obj["status"] = {}
    elif rt.kind == "Pod":
        obj["status"] = {"phase": "Pending"}
    elif rt.kind == "Namespace":
        obj["status"] = {"phase": "Active"}
    elif rt.kind == "PodDisruptionBudget":  # PodDisruptionBudgetStatus{}: the counters are not omitempty
        obj["status"] = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}


def _check_match(rv: str, match: str) -> None:
    def bad(detail: str) -> st.ApiError:
        return st.invalid(
            "ListOptions", "meta.k8s.io", "", [st.FieldError("resourceVersionMatch", "FieldValueForbidden", detail)]
        )

    if match not in ("", "Exact", "NotOlderThan"):
        raise st.invalid(
            "ListOptions",
            "meta.k8s.io",
            "",
            [
                st.FieldError(
                    "resourceVersionMatch",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{match}": supported values: "Exact", "NotOlderThan", ""',
                )
            ],
        )
    if match and not rv:
        raise bad("Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided")
    if match == "Exact" and rv == "0":
        raise bad('Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"')


def _parse_rv(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise st.bad_request(f'invalid resource version "{text}"')
    return value


def _encode_continue(rv: int, key: Key) -> str:
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": f"{key[0]}/{key[1]}"})
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[int, Key]:
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token.encode()))
        namespace, _, name = str(data["start"]).partition("/")
        return int(data["rv"]), (namespace, name)
    except (ValueError, KeyError, TypeError, binascii.Error, orjson.JSONDecodeError) as exc:
        raise st.bad_request(f"continue key is not valid: {exc}") from exc
