"""A thin JSON client for the Kubernetes API on aiohttp: one session, orjson, every status checked.

``check_response`` is the one place HTTP outcomes become our errors (kopf's ``check_response``):

=========================  ==========================================================
HTTP                       raised
=========================  ==========================================================
2xx                        nothing
409                        ``WriteConflict``
404                        ``ObjectNotFound``
410                        ``Gone`` (re-list)
401, 403                   ``AccessDenied`` naming the verb and the resource
429, 5xx                   ``ApiUnavailable``
400, 422                   ``InvalidObject``
anything else              ``UnexpectedResponse``
connection error, timeout  ``ApiUnavailable`` (from ``KubeClient``)
=========================  ==========================================================

Each mapped error chains an ``ApiStatusError`` (status, decoded ``Status``) as its cause. Only a
Kubernetes ``Status`` body's ``message`` is kept; other bodies (HTML from a proxy, ...) are cut to
256 characters so logs stay safe and short.

Credentials: every request (watches included) carries the Authorization header its
``ClusterConfig.credentials`` make at that moment. A 401 renews them (``Credentials.refresh``) and,
when that gave a different credential, the request is sent once more: the API server authenticates
before it does anything, so even a write is safe to repeat. ``KubeClient.fail`` is the one place a
401/403 becomes ``AccessDenied``: its message names the credentials sent (``ClusterConfig.identity``)
and it is logged once per identity, status, verb and resource (``kube.access_denied``), not on every
retry.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import urlencode

import aiohttp
import orjson
import structlog

from extender.core.errors import ApiUnavailable, InvalidObject, ObjectNotFound, OutcomeUnknown, WriteConflict

from .config import ClusterConfig
from .errors import AccessDenied, ApiStatusError, Gone, UnexpectedResponse
from .transport import ConnectionLost, HttpPool, Response

__all__ = ["BODY_LIMIT", "ClientSettings", "KubeClient", "check_response", "status_message"]

log = structlog.get_logger()

#: How much of a non-Status error body we keep.
BODY_LIMIT = 256

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True, slots=True)
class ClientSettings:
    request_timeout: float = 30.0
    """Whole-request limit for ordinary calls (not watches). The apiserver's own limit is 60 s;
    a bind must answer the scheduler well before its extender timeout."""
    connect_timeout: float = 10.0
    """Connecting (TCP + TLS) to the API server."""
    max_connections: int = 100
    """Connection pool size (kubernetes-asyncio's default); every watch holds one."""
    user_agent: str = "dra-extender"


#: What Go's encoding/json escapes in strings and orjson does not (HTML characters, JavaScript's
#: line separators); outside strings JSON text has none of them, so bytes can be replaced as they are.
_GO_ESCAPES = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
)


def encode_body(body: Any) -> bytes:
    """``body`` as JSON the way the API server (Go) writes it. The server keeps a claim's opaque
    ``parameters`` as the bytes it was sent and compares those bytes when it checks that the
    immutable spec did not change; it serves them escaped as Go escapes, so an update that sends
    them back differently (``&`` for ``\\u0026``) is refused with "field is immutable"."""
    data = orjson.dumps(body)
    for char, escaped in _GO_ESCAPES:
        if char in data:
            data = data.replace(char, escaped)
    return data


def status_message(body: bytes) -> tuple[str, dict[str, Any] | None]:
    """(message, Status dict or None) from an error body."""
    try:
        decoded = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        decoded = None
    if isinstance(decoded, dict) and decoded.get("kind") == "Status":
        return str(decoded.get("message") or decoded.get("reason") or ""), decoded
    text = body[:BODY_LIMIT].decode("utf-8", "replace")
    return text + ("..." if len(body) > BODY_LIMIT else ""), None


def check_response(status: int, body: bytes, *, verb: str, resource: str) -> None:
    """Raise the error for a non-2xx answer to ``verb`` on ``resource`` (table in the docstring)."""
    if 200 <= status < 300:
        return
    message, decoded = status_message(body)
    raise_for_status(status, message, decoded, verb=verb, resource=resource)


def raise_for_status(
    status: int, message: str, decoded: dict[str, Any] | None, *, verb: str, resource: str
) -> NoReturn:
    """Raise the mapped error for ``status`` (``KubeClient.fail`` adds the credentials to refusals)."""
    cause = ApiStatusError(status, message, decoded)
    error: Exception
    if status == 409:
        error = WriteConflict(message)
    elif status == 404:
        error = ObjectNotFound(message or f"{resource} not found")
    elif status == 410:
        error = Gone(message or "resource version too old")
    elif status in (401, 403):
        what = "unauthorized (no valid credentials)" if status == 401 else "forbidden"
        error = AccessDenied(
            f"{what}: cannot {verb} {resource} (HTTP {status}): {message}", verb=verb, resource=resource
        )
    elif status == 429 or status >= 500:
        error = ApiUnavailable(f"{verb} {resource}: HTTP {status}: {message}")
    elif status in (400, 422):
        error = InvalidObject(message, obj=resource)
    else:
        error = UnexpectedResponse(f"{verb} {resource}: unexpected HTTP {status}: {message}")
    raise error from cause


class KubeClient:
    """One API server: ordinary requests through an ``HttpPool`` (``transport.py``: a third of
    aiohttp's client CPU per request), watches through one aiohttp session. Create and use it
    inside the running loop."""

    def __init__(self, config: ClusterConfig, *, settings: ClientSettings = ClientSettings()) -> None:
        self.config = config
        self.settings = settings
        self._session: aiohttp.ClientSession | None = None
        self._pool: HttpPool | None = None
        self._fixed_headers = {"User-Agent": settings.user_agent, "Accept": JSON}
        #: (identity, status, verb, resource) of the refusals logged already.
        self._refusals: set[tuple[str, int, str, str]] = set()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self.config.ssl_context(), limit=self.settings.max_connections)
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={"User-Agent": self.settings.user_agent, "Accept": JSON},
                json_serialize=lambda obj: orjson.dumps(obj).decode(),
            )
        return self._session

    @property
    def pool(self) -> HttpPool:
        if self._pool is None:
            self._pool = HttpPool(
                self.config.host,
                ssl_context=self.config.ssl_context(),
                server_hostname=self.config.tls_server_name,
                limit=self.settings.max_connections,
                connect_timeout=self.settings.connect_timeout,
            )
        return self._pool

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def url(self, path: str) -> str:
        return self.config.host + path

    async def _authorization(self, headers: dict[str, str]) -> str | None:
        """Put the current Authorization header into ``headers``; returns it (None: none sent)."""
        value = await self.config.credentials.header()
        if value:
            headers["Authorization"] = value
        else:
            headers.pop("Authorization", None)
        return value

    async def _send_again(self, status: int, sent: str | None) -> bool:
        """After an answer with ``status`` to a request sent with ``sent``: whether to send it once
        more with renewed credentials (a 401, and the credentials changed)."""
        return status == 401 and await self.config.credentials.refresh(sent)

    async def request(
        self,
        method: str,
        path: str,
        *,
        verb: str,
        resource: str,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """One call; the decoded JSON answer, or the mapped error (see ``check_response``)."""
        data = None if body is None else encode_body(body)
        headers = dict(self._fixed_headers)
        if data is not None:
            headers["Content-Type"] = content_type
        target = path + ("?" + urlencode(params) if params else "")
        for attempt in range(2):
            sent = await self._authorization(headers)
            response = await self._exchange(method, target, headers, data, timeout, verb=verb, resource=resource)
            if attempt == 0 and await self._send_again(response.status, sent):
                continue
            break
        raw, status = response.body, response.status
        self.check(status, raw, verb=verb, resource=resource)
        try:
            decoded = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError as exc:
            raise ApiUnavailable(f"{verb} {resource}: the answer is not JSON") from exc
        if not isinstance(decoded, dict):
            raise ApiUnavailable(f"{verb} {resource}: the answer is not a JSON object")
        return decoded

    async def _exchange(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        data: bytes | None,
        timeout: float | None,
        *,
        verb: str,
        resource: str,
    ) -> Response:
        try:
            return await self.pool.request(
                method, target, headers, data, timeout=timeout or self.settings.request_timeout
            )
        except TimeoutError as exc:  # perhaps sent: whether it was carried out is unknown
            raise OutcomeUnknown(f"{verb} {resource}: timed out") from exc
        except ConnectionLost as exc:
            error = OutcomeUnknown if exc.sent else ApiUnavailable
            raise error(f"{verb} {resource}: {_describe(exc)}") from exc
        except OSError as exc:  # connecting failed: nothing was sent
            raise ApiUnavailable(f"{verb} {resource}: {_describe(exc)}") from exc

    def check(self, status: int, body: bytes, *, verb: str, resource: str) -> None:
        """``check_response``, with refusals named and logged (``fail``)."""
        if 200 <= status < 300:
            return
        message, decoded = status_message(body)
        self.fail(status, message, decoded, verb=verb, resource=resource)

    def fail(self, status: int, message: str, decoded: dict[str, Any] | None, *, verb: str, resource: str) -> NoReturn:
        """``raise_for_status`` for this server (watch ERROR events come here too). A 401/403's
        ``AccessDenied`` names the credentials sent, and is logged the first time this identity is
        refused this verb on this resource (a retrying reflector or repeated binds log it once)."""
        try:
            raise_for_status(status, message, decoded, verb=verb, resource=resource)
        except AccessDenied as exc:
            identity = self.config.identity
            key = (identity, status, verb, resource)
            if key not in self._refusals:
                self._refusals.add(key)
                log.warning(
                    "kube.access_denied",
                    status=status,
                    verb=verb,
                    resource=resource,
                    credentials=identity,
                    host=self.config.host,
                    reason=message,
                )
            raise AccessDenied(f"{exc.reason} [sent: {identity}]", verb=verb, resource=resource) from exc.__cause__

    @asynccontextmanager
    async def stream(
        self, path: str, *, verb: str, resource: str, params: Mapping[str, str], inactivity_timeout: float
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Open a streaming GET (a watch): yields the response once its status was checked. A
        read that waits longer than ``inactivity_timeout`` raises ``asyncio.TimeoutError``."""
        headers: dict[str, str] = {}
        limit = aiohttp.ClientTimeout(
            total=None, sock_connect=self.settings.connect_timeout, sock_read=inactivity_timeout
        )
        for attempt in range(2):
            sent = await self._authorization(headers)
            try:
                response = await self.session.get(
                    self.url(path),
                    params=params,
                    headers=headers,
                    timeout=limit,
                    server_hostname=self.config.tls_server_name,
                )
            except (TimeoutError, aiohttp.ClientError) as exc:
                raise ApiUnavailable(f"{verb} {resource}: {_describe(exc)}") from exc
            if attempt == 0 and response.status == 401:
                try:
                    again = await self._send_again(response.status, sent)
                except BaseException:
                    response.close()
                    raise
                if again:
                    response.close()
                    continue
            break
        try:
            if not 200 <= response.status < 300:
                try:
                    raw = await response.read()
                except (TimeoutError, aiohttp.ClientError):
                    raw = b""
                self.check(response.status, raw, verb=verb, resource=resource)
            yield response
        finally:
            # close, not release: an abandoned watch must not go back to the pool half-read
            response.close()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
