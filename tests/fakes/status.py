"""``metav1.Status`` bodies exactly as kube-apiserver writes them, and ``ApiError`` that carries one.

Every failure the fake answers is one of these bodies with the matching HTTP code, so a client
under test meets the same JSON it would meet on a real cluster (``reason``, ``code``, ``details``
with ``name``/``group``/``kind``, and ``causes`` for 422 Invalid).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "ApiError",
    "FieldError",
    "admission_denied",
    "already_exists",
    "bad_request",
    "conflict",
    "deleted",
    "expired",
    "failure",
    "forbidden",
    "internal_error",
    "invalid",
    "method_not_allowed",
    "not_found",
    "path_not_found",
    "status_body",
    "storage_conflict",
    "success",
    "timeout",
    "too_many_requests",
    "unauthorized",
    "unsupported_media_type",
]


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Failure ``Status`` as apimachinery's ``StatusError`` serializes it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def success(code: int = 201) -> dict[str, Any]:
    """The Success Status some verbs answer (``pods/binding`` create answers this with 201)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def deleted(resource: str, group: str, name: str, uid: str) -> dict[str, Any]:
    """What a DELETE that removed the object answers when its storage does not return the deleted
    object (``ReturnDeletedObject`` false): a Success Status naming it, without ``code``."""
    details = _details(name, group, resource)
    details["uid"] = uid
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


class ApiError(Exception):
    """An HTTP error answer: ``code`` and a Status ``body``; ``headers`` for e.g. Retry-After."""

    def __init__(self, body: dict[str, Any], *, headers: dict[str, str] | None = None) -> None:
        super().__init__(body.get("message", ""))
        self.code: int = int(body["code"])
        self.body = body
        self.headers = dict(headers or {})


def _qualified(resource: str, group: str) -> str:
    """``resourceclaims.resource.k8s.io`` or ``pods`` (core group), as messages name resources."""
    return f"{resource}.{group}" if group else resource


def _details(name: str | None, group: str, kind: str) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name is not None:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = kind
    return details


def not_found(resource: str, group: str, name: str) -> ApiError:
    """404 for a named object (``errors.NewNotFound``)."""
    message = f'{_qualified(resource, group)} "{name}" not found'
    return ApiError(status_body(404, "NotFound", message, _details(name, group, resource)))


def path_not_found() -> ApiError:
    """404 for a path no API serves (the apiserver's NotFound handler)."""
    return ApiError(status_body(404, "NotFound", "the server could not find the requested resource", {}))


def already_exists(resource: str, group: str, name: str) -> ApiError:
    """409 AlreadyExists on create."""
    message = f'{_qualified(resource, group)} "{name}" already exists'
    return ApiError(status_body(409, "AlreadyExists", message, _details(name, group, resource)))


def conflict(resource: str, group: str, name: str, cause: str) -> ApiError:
    """409 Conflict (``errors.NewConflict``): stale resourceVersion, failed precondition, ..."""
    message = f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {cause}'
    return ApiError(status_body(409, "Conflict", message, _details(name, group, resource)))


#: The cause text of a stale-resourceVersion update (``registry.OptimisticLockErrorMsg``).
MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


@dataclass(frozen=True)
class FieldError:
    """One ``field.Error``: ``field`` path, ``type`` (e.g. ``FieldValueForbidden``) and its detail
    text already prefixed the way ``field.Error.ErrorBody`` renders it (``Forbidden: ...``)."""

    field: str
    type: str
    detail: str

    def text(self) -> str:
        return f"{self.field}: {self.detail}"


def invalid(kind: str, group: str, name: str, errors: list[FieldError], *, details_kind: str = "") -> ApiError:
    """422 Invalid (``errors.NewInvalid``): details carry the Kind (``details_kind``: what the
    message and details name instead, e.g. ``leases`` for the resourceVersion error of a strategy
    that forbids unconditional updates) and one cause per error; the message lists each distinct
    error once, as ``ErrorList.ToAggregate`` dedupes them (the causes are not deduped: metadata
    errors of an update appear twice there, as upstream validates metadata twice)."""
    shown = details_kind or kind
    qualified_kind = f"{shown}.{group}" if group else shown
    texts = list(dict.fromkeys(e.text() for e in errors))
    # One error reads bare, several as Go prints an aggregate: [a, b].
    summary = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    message = f'{qualified_kind} "{name}" is invalid: {summary}'
    causes = [{"reason": e.type, "message": e.detail, "field": e.field} for e in errors]
    details = _details(name or None, group, shown)
    details["causes"] = causes
    return ApiError(status_body(422, "Invalid", message, details))


def bad_request(message: str) -> ApiError:
    """400 BadRequest (malformed selectors, names not matching the URL, undecodable bodies)."""
    return ApiError(status_body(400, "BadRequest", message))


def unsupported_media_type(content_type: str) -> ApiError:
    """415 for a PATCH content type the server does not accept (the bare ``StatusError`` the
    handler writes: no reason's text in the message, empty details)."""
    del content_type
    return ApiError(status_body(415, "UnsupportedMediaType", "415: Unsupported Media Type", {}))


def failure(code: int, message: str) -> ApiError:
    """A Failure Status with neither reason nor details (what the apiserver writes for a plain Go
    error: a 500 for ``resourceVersion should not be set on objects to be created``, an invalid
    binding)."""
    return ApiError(
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "code": code}
    )


def storage_conflict(resource: str, group: str, namespace: str, name: str, detail: str) -> ApiError:
    """409 from a failed storage precondition of an update (the uid a PUT or a binding carries):
    the StorageError text inside the Conflict, as ``InterpretUpdateError`` wraps it."""
    key = f"/registry/{resource}/{namespace}/{name}" if namespace else f"/registry/{resource}/{name}"
    cause = f"StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: {detail}"
    return conflict(resource, group, name, cause)


def method_not_allowed(verb: str, resource: str) -> ApiError:
    return ApiError(
        status_body(
            405,
            "MethodNotAllowed",
            f"the server does not allow this method on the requested resource ({verb} {resource})",
            {},
        )
    )


def expired(message: str) -> ApiError:
    """410 Gone with reason Expired (too old resourceVersion / continue token)."""
    return ApiError(status_body(410, "Expired", message))


def timeout(message: str, retry_after: int = 1) -> ApiError:
    """504 Timeout, e.g. ``Too large resource version``."""
    return ApiError(status_body(504, "Timeout", message, {"retryAfterSeconds": retry_after}))


def unauthorized() -> ApiError:
    """401 for a request without the configured bearer token."""
    return ApiError(status_body(401, "Unauthorized", "Unauthorized"))


def forbidden(
    *, user: str, verb: str, resource: str, subresource: str, group: str, namespace: str, name: str | None
) -> ApiError:
    """403 Forbidden from the RBAC authorizer, naming user, verb, resource, group and scope."""
    full = f"{resource}/{subresource}" if subresource else resource
    subject = f'{_qualified(full, group)} "{name}"' if name else _qualified(full, group)
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    message = f'{subject} is forbidden: User "{user}" cannot {verb} resource "{full}" in API group "{group}" {scope}'
    return ApiError(status_body(403, "Forbidden", message, _details(name, group, full)))


def admission_denied(resource: str, group: str, name: str, message: str) -> ApiError:
    """403 Forbidden from an admission plugin (``admission.NewForbidden``): ``message`` after the
    object's name."""
    text = f'{_qualified(resource, group)} "{name}" is forbidden: {message}'
    return ApiError(status_body(403, "Forbidden", text, _details(name, group, resource)))


def too_many_requests(retry_after: int) -> ApiError:
    """429 from API priority and fairness, with the Retry-After header."""
    body = status_body(
        429, "TooManyRequests", "Too many requests, please try again later.", {"retryAfterSeconds": retry_after}
    )
    return ApiError(body, headers={"Retry-After": str(retry_after)})


def internal_error(message: str) -> ApiError:
    """500 InternalError (``errors.NewInternalError``)."""
    body = status_body(500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]})
    return ApiError(body)
