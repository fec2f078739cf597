"""PATCH bodies the fake applies: JSON merge patch, strategic merge patch (as merge patch) and
JSON patch.

Strategic merge patch is applied as a JSON merge patch: the same for maps and scalars (labels,
annotations, spec fields, which is what dra-extender patches). Lists would be merged by their
patch merge keys on a real cluster; the fake replaces them whole and refuses the ``$patch`` /
``$retainKeys`` / ``$setElementOrder`` / ``$deleteFromPrimitiveList`` directives outright (400)
rather than silently doing something else. Server-side apply is emulated only for
PodSchedulingContexts (``apply.py``, before this module is reached); anywhere else it is 415.
"""

from __future__ import annotations

import copy
from typing import Any

from .status import ApiError, bad_request, status_body, unsupported_media_type

__all__ = ["JSON_PATCH", "MERGE", "STRATEGIC", "apply_patch"]

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _has_directive(patch: Any) -> str | None:
    if isinstance(patch, dict):
        for key, value in patch.items():
            if key.startswith("$"):
                return str(key)
            if found := _has_directive(value):
                return found
    elif isinstance(patch, list):
        for item in patch:
            if found := _has_directive(item):
                return found
    return None


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"JSON pointer {path!r} must start with /")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], op: str) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise _patch_failed(f"{op} operation does not apply: doc is missing path: /{'/'.join(parts)}")
    return node


def _patch_failed(message: str) -> ApiError:
    """A JSON patch that does not apply: the apiserver answers a generic 422 (its
    ``NewGenericServerResponse`` text, empty details); what failed is not said."""
    del message
    return ApiError(status_body(422, "Invalid", "the server rejected our request due to an error in our request", {}))


def _json_patch(doc: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise bad_request("json patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise bad_request(f"invalid JSON patch operation: {operation!r}")
        op, parts = operation["op"], _pointer(operation["path"])
        if not parts:
            raise bad_request("JSON patch on the document root is not emulated")
        parent, last = _parent(doc, parts, op), parts[-1]
        if op == "test":
            actual = (
                parent.get(last)
                if isinstance(parent, dict)
                else (parent[int(last)] if last.isdigit() and int(last) < len(parent) else None)
            )
            if actual != operation.get("value"):
                raise _patch_failed(f"testing value {operation['path']} failed: test failed")
        elif op in ("add", "replace"):
            if isinstance(parent, dict):
                if op == "replace" and last not in parent:
                    raise _patch_failed(f"replace operation does not apply: doc is missing key: {operation['path']}")
                parent[last] = copy.deepcopy(operation.get("value"))
            elif isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if op == "add":
                    parent.insert(index, copy.deepcopy(operation.get("value")))
                else:
                    parent[index] = copy.deepcopy(operation.get("value"))
        elif op == "remove":
            if isinstance(parent, dict) and last in parent:
                del parent[last]
            elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
                del parent[int(last)]
            else:
                raise _patch_failed(f"remove operation does not apply: doc is missing path: {operation['path']}")
        else:
            raise bad_request(f"JSON patch operation {op!r} is not emulated by the fake")
    return doc


def apply_patch(content_type: str, doc: dict[str, Any], patch: Any) -> dict[str, Any]:
    """The object ``doc`` after applying ``patch`` of the given Content-Type."""
    media = content_type.split(";")[0].strip().lower()
    if media == JSON_PATCH:
        result = _json_patch(doc, patch)
    elif media in (MERGE, STRATEGIC):
        if not isinstance(patch, dict):
            raise bad_request("the patch must be a JSON object")
        if media == STRATEGIC and (directive := _has_directive(patch)):
            raise bad_request(f"strategic merge patch directive {directive!r} is not emulated by the fake")
        result = merge_patch(doc, patch)
    else:
        raise unsupported_media_type(media)
    if not isinstance(result, dict):
        raise bad_request("the patched object is not a JSON object")
    return result
