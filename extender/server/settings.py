"""Settings of the HTTP server: path prefix, body limit, listen address, TLS and event loop.

``ServerSettings`` is plain data (the CLI fills it from flags and environment variables);
``ssl_context`` turns its TLS fields into an ``ssl.SSLContext`` for ``web.run_app``.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from extender.server.eventloop import EVENT_LOOPS
from extender.tlsverify import as_kubernetes_verifies

__all__ = ["DEFAULT_MAX_BODY_BYTES", "ServerSettings", "normalize_prefix", "parse_listen", "ssl_context"]

#: 64 MiB. A non-nodeCacheCapable filter request carries the full Node objects; a real Node is
#: 3-8 KB of JSON (labels, capacity, conditions, images), so 5000 nodes are ~30-40 MB. 64 MiB
#: leaves room for image-heavy nodes while still refusing absurd bodies before parsing them.
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    path_prefix: str = "/"
    """Every route lives under this prefix, so the scheduler's ``urlPrefix`` may carry a path
    (``http://host:8888/v1`` -> ``path_prefix="/v1"``)."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Bodies above this get HTTP 413 before any parsing (see ``DEFAULT_MAX_BODY_BYTES``)."""

    host: str = "127.0.0.1"
    """Loopback by default: the usual deployment is a sidecar of kube-scheduler."""

    port: int = 8888

    tls_cert_file: str | None = None
    """Serve HTTPS with this certificate chain (PEM); needs ``tls_key_file``."""

    tls_key_file: str | None = None

    tls_client_ca_file: str | None = None
    """When set, clients must present a certificate signed by this CA (mutual TLS)."""

    event_loop: str = "auto"
    """``auto`` (uvloop if installed, else asyncio's loop), ``uvloop`` or ``asyncio``; see
    ``extender.server.eventloop``."""

    def __post_init__(self) -> None:
        if self.max_body_bytes <= 0:
            raise ValueError(f"max body bytes must be positive, not {self.max_body_bytes}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0..65535, not {self.port}")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("TLS needs both a certificate file and a key file")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ValueError("a client CA file (mutual TLS) needs a server certificate and key")
        if self.event_loop not in EVENT_LOOPS:
            raise ValueError(f"event loop must be one of {', '.join(EVENT_LOOPS)}, not {self.event_loop!r}")


def normalize_prefix(prefix: str) -> str:
    """``""``, ``"/"`` -> ``"/"``; ``"v1"``, ``"/v1/"`` -> ``"/v1/"``: always slash-delimited."""
    inner = prefix.strip().strip("/")
    return f"/{inner}/" if inner else "/"


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8888`` for IPv6) -> ``(host, port)``; ValueError if malformed."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"listen address {text!r} is not HOST:PORT")
    host = host.removeprefix("[").removesuffix("]")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"listen address {text!r}: port out of range")
    return host or "0.0.0.0", port


def ssl_context(settings: ServerSettings) -> ssl.SSLContext | None:
    """The server-side TLS context, or None for plain HTTP. Raises OSError/ssl.SSLError for
    unreadable or mismatched files."""
    if not settings.tls_cert_file or not settings.tls_key_file:
        return None
    context = as_kubernetes_verifies(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    if settings.tls_client_ca_file:
        context.load_verify_locations(cafile=settings.tls_client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context
