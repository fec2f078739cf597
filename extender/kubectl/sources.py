"""Where ``kubectl dra`` reads the cluster from.

- ``cluster_objects``: the live cluster through a kubeconfig (``--kubeconfig``, ``--context``,
  ``$KUBECONFIG``, ``~/.kube/config``) or the in-cluster service account, with the kube backend's
  own config, client and discovery (``extender/backends/kube``): the served resource.k8s.io version,
  then exactly one LIST per kind (Nodes, DeviceClasses, ResourceSlices, ResourceClaimTemplates,
  ResourceClaims, Pods), nothing watched, nothing written.
- ``ExtenderClient``: a running extender's debug and device map endpoints (``--extender URL``).

Every failure is a ``SourceError`` with one line that says what to fix.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson

from extender.backends.kube.client import ClientSettings, KubeClient
from extender.backends.kube.config import load_cluster_config
from extender.backends.kube.discovery import GROUP, discover
from extender.core.errors import ExtenderError

__all__ = ["LISTED", "ExtenderClient", "SourceError", "cluster_objects"]

#: (kind, API group path, plural), in the order a cluster is best rebuilt from them.
LISTED = (
    ("Node", "/api/v1", "nodes"),
    ("DeviceClass", None, "deviceclasses"),
    ("ResourceSlice", None, "resourceslices"),
    ("ResourceClaimTemplate", None, "resourceclaimtemplates"),
    ("ResourceClaim", None, "resourceclaims"),
    ("Pod", "/api/v1", "pods"),
)


class SourceError(Exception):
    """The cluster or the extender cannot be read; the message is the one line printed."""


async def cluster_objects(
    kubeconfig: str | None, context: str | None, *, user_agent: str = "kubectl-dra"
) -> list[dict[str, Any]]:
    """Every object of the listed kinds, each with its ``kind`` and ``apiVersion``."""
    try:
        config = await load_cluster_config(kubeconfig, context=context, in_cluster=_in_cluster(kubeconfig, context))
    except Exception as exc:  # the library's ConfigException, a missing file, bad YAML, ...
        where = kubeconfig or "the default kubeconfig"
        raise SourceError(f"cannot load {where}: {_one_line(exc)}") from exc
    client = KubeClient(config, settings=ClientSettings(user_agent=user_agent, request_timeout=60.0))
    try:
        try:
            version = await discover(client)
        except ExtenderError as exc:
            raise SourceError(exc.reason) from exc
        objects: list[dict[str, Any]] = []
        for kind, base, plural in LISTED:
            path = f"{base or f'/apis/{GROUP}/{version}'}/{plural}"
            try:
                listed = await client.request("GET", path, verb="list", resource=plural)
            except ExtenderError as exc:
                raise SourceError(f"list {plural} at {config.host}: {exc.reason}") from exc
            api_version = str(listed.get("apiVersion") or ("v1" if base else f"{GROUP}/{version}"))
            for item in listed.get("items") or ():
                if isinstance(item, dict):
                    item.setdefault("apiVersion", api_version)
                    item["kind"] = kind
                    objects.append(item)
        return objects
    finally:
        await client.close()


class ExtenderClient:
    """GETs against a running extender (its prefix included in ``base``)."""

    def __init__(self, base: str, *, insecure: bool = False, timeout: float = 60.0) -> None:
        self.base = base.rstrip("/") + "/"
        self._ssl: ssl.SSLContext | bool = not insecure
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ExtenderClient:
        self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> tuple[int, Any]:
        """(status, decoded JSON) of ``GET base + path``; SourceError when unreachable or not JSON."""
        assert self._session is not None, "use ExtenderClient as an async context manager"
        url = self.base + path.lstrip("/")
        try:
            async with self._session.get(url, params=params, ssl=self._ssl) as response:
                body = await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise SourceError(f"cannot reach the extender at {self.base}: {_one_line(exc)}") from exc
        try:
            return status, orjson.loads(body) if body else None
        except orjson.JSONDecodeError as exc:
            raise SourceError(f"GET {url}: HTTP {status}, and the answer is not JSON") from exc

    async def document(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """The JSON of a 200 answer; SourceError naming the extender's error otherwise."""
        status, body = await self.get(path, params)
        if status != 200:
            message = body.get("error") if isinstance(body, dict) else None
            raise SourceError(message or f"GET {self.base}{path.lstrip('/')}: HTTP {status}")
        return body


def _in_cluster(kubeconfig: str | None, context: str | None) -> bool:
    """kubectl's rule: the pod's service account only when no kubeconfig is given or found (no
    ``--kubeconfig``, no ``--context``, no ``$KUBECONFIG``, no ``~/.kube/config``) in a pod."""
    if kubeconfig or context or os.environ.get("KUBECONFIG"):
        return False
    if os.path.exists(os.path.expanduser("~/.kube/config")):
        return False
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]
