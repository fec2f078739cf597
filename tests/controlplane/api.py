"""A small, synchronous JSON client for tests and benchmarks that drive a real API server.

It is deliberately not the extender's own client (``extender.backends.kube``): the end-to-end tier
sets up and checks the cluster with code that is not under test. Standard library only (``urllib``
over an ``ssl`` context with a client certificate or a bearer token).
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["Api", "ApiError", "eventually"]

T = TypeVar("T")


class ApiError(Exception):
    """A non-2xx answer: ``status`` and the decoded ``Status`` body (or the text)."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{method} {path}: HTTP {status}: {message}")


@dataclass
class Api:
    """``server`` (https://127.0.0.1:PORT) as the user of ``cert``/``key`` or ``token``."""

    server: str
    ca_file: Path
    cert: Path | None = None
    key: Path | None = None
    token: str | None = None
    timeout: float = 60.0

    def __post_init__(self) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if self.cert is not None:
            context.load_cert_chain(str(self.cert), str(self.key) if self.key else None)
        self._context = context

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """The decoded answer; ``ApiError`` for a non-2xx one."""
        url = self.server + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, context=self._context, timeout=self.timeout) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                decoded: Any = json.loads(raw)
            except ValueError:
                decoded = raw.decode(errors="replace")
            raise ApiError(method, path, exc.code, decoded) from None
        return json.loads(raw) if raw else None

    def text(self, path: str) -> str:
        """A plain-text endpoint (``/readyz``, ``/healthz``), stripped."""
        with urllib.request.urlopen(self._authorized(self.server + path), context=self._context, timeout=5) as answer:
            return str(answer.read().decode().strip())

    def _authorized(self, url: str) -> urllib.request.Request:
        request = urllib.request.Request(url)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        return request

    def get(self, path: str, **params: str) -> Any:
        return self.request("GET", path, params=params or None)

    def get_or_none(self, path: str) -> Any:
        try:
            return self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, path: str, body: Mapping[str, Any]) -> Any:
        return self.request("POST", path, dict(body))

    def replace(self, path: str, body: Mapping[str, Any]) -> Any:
        return self.request("PUT", path, dict(body))

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> Any:
        return self.request("PATCH", path, dict(patch), content_type="application/merge-patch+json")

    def delete(self, path: str, *, grace_seconds: int | None = None) -> Any:
        body = None if grace_seconds is None else {"gracePeriodSeconds": grace_seconds}
        try:
            return self.request("DELETE", path, body)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def items(self, path: str, **params: str) -> list[dict[str, Any]]:
        """Every item of a LIST, page by page."""
        out: list[dict[str, Any]] = []
        token = ""
        while True:
            query = dict(params, limit="500")
            if token:
                query["continue"] = token
            page = self.get(path, **query)
            out += page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return out


def eventually(check: Callable[[], T | None], *, timeout: float = 120.0, interval: float = 0.1, what: str = "") -> T:
    """Poll ``check`` until it returns something truthy (returned); a bound against a hang only:
    ``timeout`` is never what a test measures. ``AssertionError`` naming ``what`` after it."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what or check!r} (last: {last!r})")
        time.sleep(interval)
