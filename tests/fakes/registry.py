"""What the apiserver does with a request once it knows the resource: the REST semantics.

``Registry`` turns verbs into storage commits the way kube-apiserver's generic registry and the
per-type strategies do: defaults applied to every body (``defaults.py``), system metadata set on
create (uid, creationTimestamp, generation for the types that have one), the preconditions of
update (409 Conflict on a stale resourceVersion or a PUT's stale uid, 422 when the resourceVersion
is missing and the type or the strict fake requires one), metadata validated on update as upstream
does it (twice: each metadata error is two causes of the 422), ``status`` taken only through the
status subresource, finalizers delaying deletion, graceful pod deletion, managedFields recorded
for every write (``managed.py``), the ``pods/binding`` and ``pods/eviction`` subresources (eviction
with its PodDisruptionBudget rules in ``disruption.py``), LIST paging with consistent ``continue``
tokens and the initial part of WATCH. Errors are ``ApiError`` carrying the real Status body.

Per-type strategy parts live with their rules: validation in ``validation.py``, the fields the
DRAControlPlaneController gate drops in v1alpha3 writes in ``classic.py``, server-side apply in
``apply.py``, and PodGroups' and Workloads' admission, dropped fields and validation in
``podgroups.py``. PodSchedulingContext (STR131): create clears the status, a main-resource write
keeps the stored status, a ``/status`` write keeps spec and metadata, and updates without a
resourceVersion are allowed. Pods: a ``/status`` write takes labels, annotations and finalizers
from the body too (only spec, ownerReferences and deletionTimestamp are kept).

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
from .apply import plan_apply
from .classic import drop_disabled_fields
from .defaults import apply_defaults
from .disruption import check_pdb_spec, check_pdb_status, evict
from .managed import APPLY, UPDATE, Entry, encode, leaves, record_update
from .podgroups import (
    admit_pod_group,
    check_pod_group,
    check_pod_group_status,
    check_pod_group_update,
    check_workload,
    check_workload_update,
    normalise_status,
    template_ref_problem,
)
from .podgroups import drop_disabled_fields as drop_disabled_scheduling_fields
from .resources import CATALOG, RESOURCE_GROUP, SCHEDULING_GROUP, ResourceType, shape_family
from .selectors import Selector, match_all
from .status import FieldError
from .storage import Change, Key, Storage
from .validation import (
    CLASSIC_VERSION,
    check_claim_spec,
    check_claim_status,
    check_immutable_spec,
    check_metadata,
    check_metadata_update,
    check_name,
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
            if rv not in ("", "0"):
                raise st.bad_request("specifying resource version is not allowed when using continue")
            snapshot_rv, start = _decode_continue(options.continue_token)
            if rv == "0":  # served from the watch cache: the latest state after the key, limit ignored
                return self.storage.rv, start, False
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
            body = st.status_body(
                504,
                "Timeout",
                f"Timeout: Too large resource version: {wanted}, current: {self.storage.rv}",
                {
                    "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                    "retryAfterSeconds": 1,
                },
            )
            raise st.ApiError(body)
        # Legacy rule: a non-zero resourceVersion with a limit and no match means Exact.
        if match == "Exact" or (match == "" and options.limit > 0):
            return wanted, ("", ""), True
        return self.storage.rv, ("", ""), True

    def watch_start(
        self, rt: ResourceType, namespace: str, options: ListOptions, *, send_initial_events: bool | None
    ) -> tuple[list[tuple[str, dict[str, Any]]], int]:
        """The events a new watch begins with, and the resourceVersion live events follow
        (``send_initial_events`` as the apiserver decided it: ``apiserver._watch_initial_events``).

        True (also a watch from resourceVersion "" or "0" without options): synthetic ADDED for
        every current object, then live (the caller adds the ``k8s.io/initial-events-end``
        BOOKMARK when bookmarks are allowed). Otherwise from ``resourceVersion``: "" or "0" live
        only; ``N`` the changes after N replayed (410 Expired if compacted; becomes an ERROR event).
        """
        rv = options.resource_version
        collection = (rt.group, rt.plural)
        if send_initial_events:
            current = self.storage.current(collection)
            events = [
                ("ADDED", current[key])
                for key in sorted(current)
                if (not namespace or key[0] == namespace) and options.selector(current[key])
            ]
            return events, self.storage.rv
        if rv in ("", "0"):
            return [], self.storage.rv
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
        operation: str = UPDATE,
    ) -> dict[str, Any]:
        """POST: a new object, defaulted (``defaults.py``), with server-set metadata; status reset
        where a status subresource exists (as the strategies' PrepareForCreate). ``manager`` (with
        ``operation``) is recorded in managedFields as the owner of every field (``managed.py``)."""
        obj = self._check_body(rt, version, namespace, body)
        self._drop_disabled(rt, version, obj, None)
        meta = _meta(obj)
        if meta.get("resourceVersion"):
            raise st.failure(500, "resourceVersion should not be set on objects to be created")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = str(meta["generateName"]) + "".join(self.rng.choice(_NAME_ALPHABET) for _ in range(5))
        name = meta.get("name")
        apply_defaults(rt, version, obj)
        _admit(rt, obj)
        errors = check_name(name) + check_metadata(meta) + _object_errors(rt, version, obj)
        if errors:
            raise st.invalid(rt.kind, rt.group, str(name or ""), errors)
        if rt.namespaced and self.storage.get(("", "namespaces"), ("", namespace)) is None:
            raise st.not_found("namespaces", "", namespace)
        self._check_references(rt, namespace, str(name), obj)
        collection, key = (rt.group, rt.plural), (namespace, str(name))
        if self.storage.get(collection, key) is not None:
            raise st.already_exists(rt.plural, rt.group, str(name))
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds", "generation", "uid", "creationTimestamp"):
            meta.pop(field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now = self.clock()
        if rt.generation:
            meta["generation"] = 1
        _reset_status_on_create(rt, obj)
        if manager is not None:
            api_version = rt.api_version(version)
            if operation == APPLY:
                owned = frozenset(leaves(obj, with_status=False))
                meta["managedFields"] = encode([Entry(manager, APPLY, api_version, owned, now)])
            else:
                meta["managedFields"] = record_update(
                    None, obj, manager=manager, api_version=api_version, time=now, given=meta.get("managedFields")
                )
        obj["metadata"] = _prune_metadata(meta)
        return self.storage.commit(collection, key, obj)

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
        (only status taken, and for pods labels, annotations and finalizers), guarded by the uid
        and resourceVersion the body carries; ``manager``'s changes recorded in managedFields."""
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
            new = self._merge_status(rt, version, old, new_in)
            errors = _status_errors(rt, version, old, new)
        else:
            self._drop_disabled(rt, version, new_in, old)
            apply_defaults(rt, version, new_in)
            new = self._merge_main(rt, version, old, new_in)
            errors = self._main_errors(rt, version, old, new)
        meta_errors = check_metadata_update(_meta(old), _meta(new))
        errors = meta_errors + meta_errors + errors
        if errors:
            raise st.invalid(rt.kind, rt.group, name, errors)
        if manager is not None:
            new["metadata"] = _prune_metadata(
                {
                    **_meta(new),
                    "managedFields": record_update(
                        old,
                        new,
                        manager=manager,
                        api_version=rt.api_version(version),
                        time=self.clock(),
                        subresource=subresource,
                        given=meta_in.get("managedFields"),
                    ),
                }
            )
        return self._commit_update(rt, old, new)

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
        if config.get("spec") is not None and not isinstance(config.get("spec"), dict):
            raise st.bad_request("spec of the applied configuration must be an object")
        old = self.storage.get((rt.group, rt.plural), (namespace, name))
        if old is None:
            if meta.get("resourceVersion"):
                raise st.conflict(rt.plural, rt.group, name, st.MODIFIED)
            return self.create(rt, version, namespace, config, manager=manager, operation=APPLY), True
        self.serve(rt, version, old)
        self._check_apply_preconditions(rt, old, meta)
        apply_defaults(rt, version, config)
        new = plan_apply(
            old, config, manager=manager, api_version=rt.api_version(version), time=self.clock(), force=force
        )
        new["apiVersion"] = rt.api_version(version)
        new["metadata"] = _prune_metadata(_meta(new))
        if rt.generation and new.get("spec") != old.get("spec"):
            new["metadata"]["generation"] = int(_meta(old).get("generation") or 1) + 1
        self._drop_disabled(rt, version, new, old)
        meta_errors = check_metadata_update(_meta(old), _meta(new))
        errors = meta_errors + meta_errors + self._main_errors(rt, version, old, new)
        if errors:
            raise st.invalid(rt.kind, rt.group, name, errors)
        return self._commit_update(rt, old, new), False

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
        one the write is unconditional (the apiserver retries patches on its own conflicts). A
        uid in the patch is no precondition but a change of an immutable field: 422, as upstream
        (a PUT's uid is a precondition: 409)."""
        from .patches import apply_patch

        old = self._existing(rt, namespace, name)
        current = self.serve(rt, version, old)
        patched = apply_patch(content_type, copy.deepcopy(current), patch)
        meta = _meta(patched)
        if meta.get("name") != name:
            raise st.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        uid = meta.get("uid")
        if uid and uid != _meta(old).get("uid"):
            error = FieldError("metadata.uid", "FieldValueInvalid", f'Invalid value: "{uid}": field is immutable')
            raise st.invalid(rt.kind, rt.group, name, [error, error])
        if not meta.get("resourceVersion"):
            meta["resourceVersion"] = _meta(old).get("resourceVersion")
            patched["metadata"] = meta
        return self.update(rt, version, namespace, name, patched, subresource=subresource, manager=manager)

    def delete(self, rt: ResourceType, namespace: str, name: str, options: Any) -> dict[str, Any]:
        """DELETE: preconditions from DeleteOptions; with finalizers only ``deletionTimestamp`` is
        set (generation bumped) and the object stays until its last finalizer is removed; pods
        are deleted gracefully (``remove``)."""
        old = self._existing(rt, namespace, name)
        options = options if isinstance(options, dict) else {}
        preconditions = options.get("preconditions") or {}
        meta = _meta(old)
        if preconditions.get("uid") and preconditions["uid"] != meta.get("uid"):
            raise st.conflict(
                rt.kind,
                rt.group,
                name,
                f"the UID in the precondition ({preconditions['uid']}) does not match the UID in record "
                f"({meta.get('uid')}). The object might have been deleted and then recreated",
            )
        if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != meta.get("resourceVersion"):
            raise st.conflict(
                rt.kind,
                rt.group,
                name,
                f"the ResourceVersion in the precondition ({preconditions['resourceVersion']}) does not match the "
                f"ResourceVersion in record ({meta.get('resourceVersion')}). The object might have been modified",
            )
        return self.remove(rt, namespace, name, options=options)

    def remove(
        self, rt: ResourceType, namespace: str, name: str, *, force: bool = False, options: Any = None
    ) -> dict[str, Any]:
        """Delete now (no finalizers, or ``force``) or mark as being deleted. A pod goes the
        graceful way first (``_delete_pod``)."""
        old = self._existing(rt, namespace, name)
        collection, key, meta = (rt.group, rt.plural), (namespace, name), _meta(old)
        if force:
            removed = self.storage.commit(collection, key, None)
            self._after_removal(rt, removed)
            return removed
        if rt.kind == "Pod" and not rt.group:
            return self._delete_pod(rt, old, options if isinstance(options, dict) else {})
        if not meta.get("finalizers"):
            removed = self.storage.commit(collection, key, None)
            self._after_removal(rt, removed)
            return removed
        if meta.get("deletionTimestamp"):
            return old
        new_meta = {**meta, "deletionTimestamp": self.clock(), "deletionGracePeriodSeconds": 0}
        if rt.generation and meta.get("generation"):
            new_meta["generation"] = int(meta["generation"]) + 1
        return self.storage.commit(collection, key, {**old, "metadata": new_meta})

    def _delete_pod(self, rt: ResourceType, old: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
        """A pod's graceful deletion (``CheckGracefulDelete``): the grace period is the options',
        else ``spec.terminationGracePeriodSeconds``, else 30 (the default the fake does not write),
        and 0 for a pod on no node or that has finished. The pod is first marked (MODIFIED:
        ``deletionTimestamp`` now + grace, ``deletionGracePeriodSeconds``, generation + 1); with
        grace 0 and no finalizers it is then deleted (DELETED, the marked state), and that is the
        answer. With a grace period the real pod stays until its kubelet confirms; the fake has no
        kubelet and deletes it at once too, answering the marked pod as the real server does.
        Finalizers keep it, marked."""
        meta, spec = _meta(old), old.get("spec")
        spec = spec if isinstance(spec, dict) else {}
        collection, key = (rt.group, rt.plural), (str(meta.get("namespace") or ""), str(meta.get("name")))
        grace = options.get("gracePeriodSeconds")
        if not isinstance(grace, int) or isinstance(grace, bool):
            grace = spec.get("terminationGracePeriodSeconds")
            grace = grace if isinstance(grace, int) and not isinstance(grace, bool) else 30
        phase = (old.get("status") or {}).get("phase") if isinstance(old.get("status"), dict) else None
        if not spec.get("nodeName") or phase in ("Failed", "Succeeded"):
            grace = 0
        grace = max(grace, 1) if grace < 0 else grace
        marked = old
        if not meta.get("deletionTimestamp"):
            new_meta = {
                **meta,
                "deletionTimestamp": _later(self.clock(), grace),
                "deletionGracePeriodSeconds": grace,
            }
            if meta.get("generation"):
                new_meta["generation"] = int(meta["generation"]) + 1
            marked = self.storage.commit(collection, key, {**old, "metadata": new_meta})
        if _meta(marked).get("finalizers"):
            return marked
        removed = self.storage.commit(collection, key, None, final=marked)
        self._after_removal(rt, removed)
        return removed if grace == 0 else marked

    def bind(self, namespace: str, name: str, body: Any) -> dict[str, Any]:
        """``POST pods/NAME/binding``: set ``spec.nodeName`` and PodScheduled=True once. An invalid
        target is the plain 500 the real handler answers; a stale uid its storage Conflict."""
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
        problems = []
        if target.get("kind") not in (None, "", "Node"):
            problems.append(f'target.kind: Unsupported value: "{target.get("kind")}": supported values: "Node", ""')
        if not target.get("name"):
            problems.append("target.name: Required value")
        if problems:
            raise st.failure(500, problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]")
        pods = resource_for_kind("Pod")
        pod = self.storage.get(("", "pods"), (namespace, name))
        if pod is None:
            raise st.not_found("pods", "", name)
        pod_meta, node = _meta(pod), target["name"]
        if meta.get("uid") and meta["uid"] != pod_meta.get("uid"):
            raise st.storage_conflict(
                "pods",
                "",
                namespace,
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
        """Direct write for tests (no admission, no validation, no managedFields): create or
        replace the whole object, status included, keeping uid and creationTimestamp of an existing
        one. Defaulted (``defaults.py``), as everything a real server stores and serves is."""
        obj = copy.deepcopy(raw)
        group, _, version = str(obj.get("apiVersion") or "").rpartition("/")
        rt = resource_for_kind(str(obj.get("kind")), group)
        if version not in rt.versions:
            raise ValueError(f"{rt.kind} has no version {version!r} in the fake")
        apply_defaults(rt, version, obj)
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

    def record_status_write(
        self, rt: ResourceType, old: dict[str, Any], new: dict[str, Any], *, manager: str
    ) -> dict[str, Any]:
        """Commit ``new`` (``old`` with another status) as a ``/status`` write by ``manager``, its
        managedFields entry included: the apiserver's own writes (the eviction handler's budget
        update) and the fake's stand-in controllers."""
        meta = _meta(new)
        fields = record_update(
            old, new, manager=manager, api_version=str(new.get("apiVersion")), time=self.clock(), subresource="status"
        )
        new = {**new, "metadata": _prune_metadata({**meta, "managedFields": fields})}
        key = (str(meta.get("namespace") or ""), str(meta.get("name")))
        return self.storage.commit((rt.group, rt.plural), key, new)

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
        """An object is gone for good: a pod's dependents go with it."""
        if rt.kind == "Pod" and not rt.group:
            meta = _meta(obj)
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
        if rt.group == SCHEDULING_GROUP:
            drop_disabled_scheduling_fields(rt.kind, new, old, parts=parts)

    def _check_references(self, rt: ResourceType, namespace: str, name: str, obj: dict[str, Any]) -> None:
        """Validating admission of a new object that names others: a PodGroup's Workload template
        must exist (``podgroups.py``): 403 otherwise."""
        if rt.kind != "PodGroup" or rt.group != SCHEDULING_GROUP:
            return
        problem = template_ref_problem(
            obj, lambda workload: self.storage.get((SCHEDULING_GROUP, "workloads"), (namespace, workload))
        )
        if problem:
            raise st.admission_denied(rt.plural, rt.group, name, problem)

    def _main_errors(
        self, rt: ResourceType, version: str, old: dict[str, Any], new: dict[str, Any]
    ) -> list[FieldError]:
        """Kind validation of a main-resource write (update, patch, apply) of ``old`` into ``new``
        (the metadata's is ``check_metadata_update``)."""
        errors = check_immutable_spec(rt.kind, old, new)
        if rt.kind == "PodSchedulingContext":
            errors += check_pod_scheduling_spec(new)
        if rt.kind == "PodDisruptionBudget":
            errors += check_pdb_spec(new)
        if rt.group == SCHEDULING_GROUP:
            errors += check_pod_group_update(old, new) if rt.kind == "PodGroup" else check_workload_update(old, new)
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
            raise st.bad_request(
                f'{body["kind"]} in version "{version}" cannot be handled as a {rt.kind}: no kind "{body["kind"]}" '
                f'is registered for version "{want}" in scheme "pkg/api/legacyscheme/scheme.go:30"'
            )
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
        """A PUT's storage preconditions: the body's uid (409, the StorageError Conflict), then its
        resourceVersion (409 when stale; when absent, 422 for a strategy without unconditional
        updates, and for every type but the ``unconditional_update`` ones on the strict fake)."""
        name, old_meta = str(_meta(old).get("name")), _meta(old)
        uid = meta_in.get("uid")
        if uid and uid != old_meta.get("uid"):
            raise st.storage_conflict(
                rt.plural,
                rt.group,
                str(old_meta.get("namespace") or ""),
                name,
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {old_meta.get('uid')}",
            )
        version = meta_in.get("resourceVersion")
        if not version:
            allowed = rt.unconditional_update or (self.unconditional_updates and not rt.conditional_update)
            if not allowed:
                error = FieldError(
                    "metadata.resourceVersion", "FieldValueInvalid", "Invalid value: 0: must be specified for an update"
                )
                raise st.invalid(rt.kind, rt.group, name, [error], details_kind=rt.plural)
        elif version != old_meta.get("resourceVersion"):
            raise st.conflict(rt.plural, rt.group, name, st.MODIFIED)

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

    def _merge_status(
        self, rt: ResourceType, version: str, old: dict[str, Any], new_in: dict[str, Any]
    ) -> dict[str, Any]:
        """The object a ``/status`` PUT stores: the stored one with the body's status (``{}`` when
        it has none: a status struct is always written). Metadata stays as stored
        (``ResetObjectMetaForStatus``) except for pods, whose status strategy keeps only spec,
        ownerReferences and deletionTimestamp: labels, annotations and finalizers come from the
        body there."""
        new = {**old, "apiVersion": rt.api_version(version)}
        status = new_in.get("status")
        new["status"] = status if isinstance(status, dict) and status else _empty_status(rt)
        if rt.kind == "PodGroup":
            normalise_status(new["status"])
        if rt.kind == "Pod" and not rt.group:
            meta, meta_in = dict(_meta(old)), _meta(new_in)
            for field in ("labels", "annotations", "finalizers"):
                if field in meta_in:
                    meta[field] = meta_in[field]
                else:
                    meta.pop(field, None)
            new["metadata"] = _prune_metadata(meta)
        return new

    def _commit_update(self, rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        """Commit unless nothing changed (then the stored object comes back, same resourceVersion,
        no watch event). An object being deleted whose last finalizer went is removed: the update
        itself is never stored, so the watch sees the stored object (finalizers and all) DELETED at
        a new resourceVersion and the writer gets the updated object back with the resourceVersion
        it had, as upstream."""
        if _without_rv(new) == _without_rv(old):
            return old
        meta, key = _meta(new), (str(_meta(old).get("namespace") or ""), str(_meta(old)["name"]))
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            removed = self.storage.commit((rt.group, rt.plural), key, None)
            self._after_removal(rt, removed)
            return {**new, "metadata": {**meta, "resourceVersion": _meta(old).get("resourceVersion")}}
        return self.storage.commit((rt.group, rt.plural), key, new)


def watch_event(change: Change, selector: Selector) -> tuple[str, dict[str, Any]] | None:
    """The event a filtered watch sees for a change: an object entering the selection is ADDED,
    one leaving it is DELETED with its previous state (the last one the watcher could see) at the
    change's resourceVersion, as the watch cache does."""
    if change.type == "DELETED":
        return ("DELETED", change.obj) if selector(change.obj) else None
    now = selector(change.obj)
    before = change.prev is not None and selector(change.prev)
    if now and before:
        return ("MODIFIED", change.obj)
    if now:
        return ("ADDED", change.obj)
    if before and change.prev is not None:
        version = _meta(change.obj).get("resourceVersion")
        return ("DELETED", {**change.prev, "metadata": {**_meta(change.prev), "resourceVersion": version}})
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
    if rt.kind == "ResourceClaimTemplate":
        return check_claim_spec(version, obj, template=True)
    if rt.kind == "PodDisruptionBudget":
        return check_pdb_spec(obj)
    if rt.kind == "PodGroup":
        return check_pod_group(obj)
    if rt.kind == "Workload":
        return check_workload(obj)
    return []


def _admit(rt: ResourceType, obj: dict[str, Any]) -> None:
    """The mutating admission plugins of a create: PodGroupProtection (``podgroups.py``)."""
    if rt.kind == "PodGroup" and rt.group == SCHEDULING_GROUP:
        admit_pod_group(obj)


def _later(timestamp: str, seconds: int) -> str:
    """``timestamp`` (the clock's ``metav1.Time``) plus ``seconds``; unchanged when it does not parse."""
    try:
        when = datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return timestamp
    return (when + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _empty_status(rt: ResourceType) -> dict[str, Any]:
    """A status struct with nothing set, as the apiserver writes it (a budget's counters are not
    ``omitempty``)."""
    if rt.kind == "PodDisruptionBudget":
        return {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
    return {}


def _status_errors(rt: ResourceType, version: str, old: dict[str, Any], new: dict[str, Any]) -> list[FieldError]:
    """Kind-specific validation of a status write."""
    if rt.kind == "ResourceClaim":
        return check_claim_status(old, new.get("status") or {}, version=version)
    if rt.kind == "PodSchedulingContext":
        return check_pod_scheduling_status(new.get("status"))
    if rt.kind == "PodDisruptionBudget":
        return check_pdb_status(new.get("status"))
    if rt.kind == "PodGroup":
        return check_pod_group_status(new)
    return []


def _reset_status_on_create(rt: ResourceType, obj: dict[str, Any]) -> None:
    if rt.kind in ("ResourceClaim", "PodSchedulingContext", "PodGroup"):
        obj["status"] = {}
    elif rt.kind == "Pod":
        obj["status"] = {"phase": "Pending"}
    elif rt.kind == "Namespace":
        obj["status"] = {"phase": "Active"}
    elif rt.kind == "PodDisruptionBudget":
        obj["status"] = _empty_status(rt)


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
    if value < 0 or not text.isdigit():
        raise st.bad_request(
            f'invalid resource version: resourceVersion: Invalid value: "{text}": '
            f'strconv.ParseUint: parsing "{text}": invalid syntax'
        )
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
        raise st.bad_request(f"invalid continue token: continue key is not valid: {exc}") from exc
