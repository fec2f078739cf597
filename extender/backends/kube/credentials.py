"""Credentials: the Authorization header every API request carries, for each way a user authenticates.

==========================================  =====================  ===========================================
where the credential comes from             ``Credentials``        renewed
==========================================  =====================  ===========================================
in-cluster ServiceAccount token             ``TokenFile``          when the file changes (kubelet rotation)
kubeconfig ``tokenFile``                    ``TokenFile``          when the file changes
kubeconfig ``token``                        ``StaticHeader``       never
kubeconfig ``exec`` plugin (a token)        ``ExecPlugin``         at its ``expirationTimestamp``
kubeconfig ``username`` + ``password``      ``StaticHeader``       never (basic auth)
kubeconfig ``auth-provider`` (gcp, oidc)    ``StaticHeader``       never (deprecated upstream; as loaded)
a client certificate (kubeconfig or exec)   ``NO_CREDENTIALS``     (sent in the TLS handshake, not a header)
nothing                                     ``NO_CREDENTIALS``     (anonymous)
==========================================  =====================  ===========================================

Every kind is also renewed when the API server answers 401 (``refresh``): the client then sends the
request once more if the credential changed, as client-go does for exec plugins; a token file
re-read at that moment also covers a rewrite the file's status did not show.

Why not kubernetes-asyncio's own refresh: its in-cluster loader re-reads the token only through a
refresh hook on a one-minute wall-clock timer and keeps a trailing newline; its kubeconfig loader
reads ``tokenFile`` once, and runs an exec plugin once (``refresh_token`` is a task that sleeps). We
still let its loaders parse the kubeconfig and run the plugin the first time; ``config.py`` turns
what they leave in ``Configuration.api_key["BearerToken"]`` (the whole header value, ``"Bearer x"``
or ``"Basic y"``, in every version from 30.1 to 36.1) into one of these.

Every header value is checked here: exactly one scheme word (``Bearer`` or ``Basic``) and a token
without whitespace or control characters, since ``transport.py`` writes headers as they are.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

from .errors import CredentialsUnavailable

__all__ = [
    "NO_CREDENTIALS",
    "Credentials",
    "ExecPlugin",
    "StaticHeader",
    "TokenFile",
    "bearer",
    "header_value",
]

_SCHEMES = {"bearer": "Bearer", "basic": "Basic"}


def _check_token(token: str, where: str) -> str:
    if not token:
        raise CredentialsUnavailable(f"the token from {where} is empty")
    if any(ch.isspace() or not ch.isprintable() for ch in token):
        # A newline inside would end the header line: refuse rather than send a broken request.
        raise CredentialsUnavailable(f"the token from {where} contains whitespace or control characters")
    return token


def bearer(token: str, where: str) -> str:
    """``"Bearer <token>"`` from a raw token (surrounding whitespace dropped, as client-go does)."""
    return f"Bearer {_check_token(token.strip(), where)}"


def header_value(value: str, prefix: str | None, where: str) -> str:
    """The Authorization value from what a kubernetes-asyncio ``Configuration`` holds: ``value``
    from ``api_key`` and ``prefix`` from ``api_key_prefix``. Its loaders store the scheme in the
    value and no prefix; a caller may store a bare token with the prefix ``Bearer``; either way the
    scheme is sent exactly once (a bare token gets ``Bearer``)."""
    words = (f"{prefix} {value}" if prefix else value).split()
    while len(words) > 2 and words[0].lower() == words[1].lower() and words[0].lower() in _SCHEMES:
        words.pop(0)  # "Bearer Bearer x": a prefix on a value that already has it
    if len(words) == 1:
        words.insert(0, "Bearer")
    if len(words) != 2 or words[0].lower() not in _SCHEMES:
        raise CredentialsUnavailable(f"the credential from {where} is neither a bearer token nor basic auth")
    return f"{_SCHEMES[words[0].lower()]} {_check_token(words[1], where)}"


class Credentials:
    """No Authorization header: anonymous, or a client certificate (sent in the TLS handshake).
    Subclasses make the header; ``describe`` says what they send, for logs and error messages."""

    def describe(self) -> str:
        return "no credentials"

    async def header(self) -> str | None:
        """The Authorization value for the next request (None: send none). Raises
        ``CredentialsUnavailable`` when none can be made now."""
        return None

    async def refresh(self, refused: str | None) -> bool:
        """The API server answered 401 to a request sent with ``refused``: renew the credential.
        True when the next ``header()`` differs, so the request is worth sending once more."""
        return False


#: The credentials of an anonymous (or client certificate) configuration.
NO_CREDENTIALS = Credentials()


class StaticHeader(Credentials):
    """A fixed header: a kubeconfig ``token``, basic auth, an auth-provider's token."""

    def __init__(self, value: str, description: str) -> None:
        self._value = value
        self._description = description

    def describe(self) -> str:
        return self._description

    async def header(self) -> str:
        return self._value


class TokenFile(Credentials):
    """A bearer token read from a file, read again whenever the file changes.

    The kubelet rotates a projected ServiceAccount token by writing a new file and swapping a
    symlink, so the path's status (device, inode, size, mtime, ctime) changes with every rotation:
    one ``stat`` per request (about a microsecond) notices it, with no timer. A file that is missing
    or empty for a moment (a non-atomic writer) keeps the last token in use; a 401 reads it again
    whatever its status says."""

    def __init__(self, path: str, *, description: str | None = None) -> None:
        self.path = path
        self._description = description or f"bearer token from {path}"
        self._status: tuple[int, ...] | None = None
        self._value: str | None = None

    def describe(self) -> str:
        return self._description

    async def header(self) -> str:
        self._reload(force=False)
        assert self._value is not None  # _reload raises when it has nothing to send
        return self._value

    async def refresh(self, refused: str | None) -> bool:
        self._reload(force=True)
        return self._value != refused

    def _reload(self, *, force: bool) -> None:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            if self._value is None:
                raise CredentialsUnavailable(f"cannot read the token file {self.path}: {exc.strerror}") from exc
            return  # being replaced: keep the token we have
        status = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if status == self._status and not force:
            return
        try:
            with open(self.path, encoding="utf-8") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            if self._value is None:
                raise CredentialsUnavailable(f"cannot read the token file {self.path}: {exc}") from exc
            return
        if not token and self._value is not None:
            return  # half-written: the status is not recorded, so the next request reads it again
        self._value = bearer(token, self.path)
        self._status = status


#: Runs an exec plugin once: its ExecCredential ``status`` (``token``, ``expirationTimestamp``).
PluginRun = Callable[[], Awaitable[Mapping[str, Any]]]


class ExecPlugin(Credentials):
    """A token from an exec credential plugin (``aws eks get-token``, ``gke-gcloud-auth-plugin``,
    ...), kept until its ``expirationTimestamp`` (none: until a 401), then the plugin runs again.
    Concurrent requests that find it expired wait for one run. ``clock`` is wall-clock seconds
    (the timestamp is a wall-clock time); tests pass their own."""

    def __init__(
        self,
        run: PluginRun,
        *,
        command: str,
        clock: Callable[[], float] = time.time,
        token: str | None = None,
        expires: float | None = None,
    ) -> None:
        self._run = run
        self._command = command
        self._clock = clock
        #: What the loader got from its first run (None: run it at the first request).
        self._value = bearer(token, self.describe()) if token else None
        self._expires = expires
        self._generation = 0
        self._lock = asyncio.Lock()
        #: How many times the plugin was run here (not counting the loader's first run).
        self.runs = 0

    def describe(self) -> str:
        return f"bearer token from the exec plugin {self._command}"

    def _expired(self) -> bool:
        return self._expires is not None and self._clock() >= self._expires

    async def header(self) -> str:
        if self._value is None or self._expired():
            await self._renew(self._generation)
        assert self._value is not None
        return self._value

    async def refresh(self, refused: str | None) -> bool:
        if refused == self._value:
            await self._renew(self._generation)
        return self._value != refused

    async def _renew(self, seen: int) -> None:
        async with self._lock:
            if self._generation != seen:
                return  # another request ran the plugin while this one waited
            self.runs += 1
            try:
                status = await self._run()
            except Exception as exc:  # the library's ConfigException, OSError, bad JSON, ...
                raise CredentialsUnavailable(f"the exec plugin {self._command} failed: {exc}") from exc
            token = status.get("token")
            if not isinstance(token, str) or not token:
                # A plugin that gives client certificates is read once, at start (config.py).
                raise CredentialsUnavailable(f"the exec plugin {self._command} gave no token")
            self._value = bearer(token, self.describe())
            self._expires = _timestamp(status.get("expirationTimestamp"), self._command)
            self._generation += 1


def _timestamp(value: Any, command: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 ``expirationTimestamp`` (None when absent)."""
    if value is None or value == "":
        return None
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError as exc:
        raise CredentialsUnavailable(
            f"the exec plugin {command} gave an expirationTimestamp that is not RFC 3339: {value!r}"
        ) from exc
