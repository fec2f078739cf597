"""Errors only the Kubernetes backend raises, on top of ``extender.core.errors``.

::

    ExtenderError
    ├── Transient
    │   ├── Gone                    410: a resourceVersion or continue token too old (re-list)
    │   └── CredentialsUnavailable  the exec plugin failed, the token file is unreadable or empty
    ├── KubeStartupError            fatal: the backend cannot work with this server as configured
    │   ├── ServerUnreachable       no answer from the API server at all
    │   ├── AccessDenied            401/403, naming the verb and the resource
    │   └── ApiNotServed            resource.k8s.io (or a resource in it) is not served
    └── UnexpectedResponse          an HTTP status we have no meaning for (405, 415, ...)

``ApiStatusError`` is not an ``ExtenderError``: it is the *cause* chained under each mapped error
and keeps the HTTP status and the Kubernetes ``Status`` body for logs and tests.
"""

from __future__ import annotations

from typing import Any

from extender.core.errors import ExtenderError, Transient

__all__ = [
    "AccessDenied",
    "ApiNotServed",
    "ApiStatusError",
    "CredentialsUnavailable",
    "Gone",
    "KubeStartupError",
    "ServerUnreachable",
    "UnexpectedResponse",
]


class ApiStatusError(Exception):
    """The raw failure: HTTP status, the decoded ``Status`` (or None) and a short message."""

    def __init__(self, status: int, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.body = body


class Gone(Transient):
    """HTTP 410 (or a watch ERROR event with code 410): the resourceVersion is too old; re-list."""


class CredentialsUnavailable(Transient):
    """No Authorization header can be made now: the exec plugin failed or gave no token, the token
    file cannot be read or is empty. Transient: a plugin or a kubelet may do better next time; the
    reflectors retry with backoff, a bind answers ``Error``."""


class KubeStartupError(ExtenderError):
    """The backend cannot start against this server; the message says what to fix."""


class ServerUnreachable(KubeStartupError):
    """The API server did not answer (connection refused, DNS, TLS, timeout)."""


class AccessDenied(KubeStartupError):
    """401/403. Fatal at startup; during bind it answers ``Error`` like any other failure. The
    message names the credentials sent (``ClusterConfig.identity``) when ``KubeClient`` raised it."""

    def __init__(self, reason: str, *, verb: str, resource: str) -> None:
        super().__init__(reason)
        self.verb = verb
        self.resource = resource


class ApiNotServed(KubeStartupError):
    """The server does not serve resource.k8s.io in a version we speak, or lacks a resource."""


class UnexpectedResponse(ExtenderError):
    """An HTTP status with no mapping (for example 405 or 415): a bug on one side, not transient."""
