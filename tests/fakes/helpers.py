"""Helpers for tests that talk to the fake apiserver over HTTP: one-shot calls, a watch reader,
and small manifests."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson

__all__ = ["CLAIMS", "PDBS", "PODS", "Watch", "allocation", "call", "claim", "eviction", "pdb", "pod"]

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
PODS = "/api/v1/namespaces/default/pods"
PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"


async def call(
    http: aiohttp.ClientSession,
    method: str,
    path: str,
    body: Any = None,
    *,
    params: dict[str, str] | None = None,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """One request; (status, decoded JSON body)."""
    data = None if body is None else orjson.dumps(body)
    all_headers = {"Content-Type": content_type, **(headers or {})}
    async with http.request(method, path, data=data, params=params, headers=all_headers) as response:
        raw = await response.read()
        return response.status, orjson.loads(raw) if raw else None


def claim(name: str, *, namespace: str = "default", finalizers: list[str] | None = None) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": "class-a"}}]}},
    }
    if finalizers:
        raw["metadata"]["finalizers"] = finalizers
    return raw


def pod(
    name: str, *, node: str = "", labels: dict[str, str] | None = None, phase: str = "", ready: bool = False
) -> dict[str, Any]:
    """A pod manifest; ``phase`` / ``ready`` give it a status (kept by ``put_object``, reset to
    Pending by an HTTP create): ``ready`` means phase Running with a Ready=True condition."""
    raw: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    if node:
        raw["spec"]["nodeName"] = node
    if phase or ready:
        raw["status"] = {"phase": phase or "Running"}
        if ready:
            raw["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastProbeTime": None}]
    return raw


def pdb(
    name: str,
    labels: dict[str, str] | None = None,
    *,
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    disruptions_allowed: int | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """A policy/v1 PodDisruptionBudget selecting ``labels`` (matchLabels; None: no selector);
    ``disruptions_allowed`` gives it the status a test writes with ``put_object``."""
    spec: dict[str, Any] = {}
    if labels is not None:
        spec["selector"] = {"matchLabels": labels}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    raw: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    if disruptions_allowed is not None:
        raw["status"] = {"disruptionsAllowed": disruptions_allowed}
    return raw


def eviction(name: str, *, uid: str | None = None, namespace: str = "default", **delete_options: Any) -> dict[str, Any]:
    """A policy/v1 Eviction body; ``uid`` becomes ``deleteOptions.preconditions.uid``."""
    raw: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    options = dict(delete_options)
    if uid is not None:
        options.setdefault("preconditions", {})["uid"] = uid
    if options:
        raw["deleteOptions"] = options
    return raw


def allocation(request: str = "req-0") -> dict[str, Any]:
    return {
        "devices": {"results": [{"request": request, "driver": "driver-a", "pool": "pool-1", "device": "device-1"}]},
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]
        },
    }


class Watch:
    """One watch over real HTTP: ``await w.next()`` is the next event, ``await w.rest()`` every
    event until the server ends the stream."""

    def __init__(self, http: aiohttp.ClientSession, path: str, **params: str) -> None:
        self.http, self.path, self.params = http, path, {"watch": "true", **params}
        self.response: aiohttp.ClientResponse | None = None

    async def __aenter__(self) -> Watch:
        self.response = await self.http.get(self.path, params=self.params)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.response is not None
        self.response.close()

    @property
    def status(self) -> int:
        assert self.response is not None
        return self.response.status

    async def next(self, timeout: float = 5.0) -> dict[str, Any]:
        assert self.response is not None
        line = await asyncio.wait_for(self.response.content.readline(), timeout)
        assert line, "the watch stream ended"
        event: dict[str, Any] = orjson.loads(line)
        return event

    async def rest(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        assert self.response is not None
        events = []
        async with asyncio.timeout(timeout):
            while line := await self.response.content.readline():
                events.append(orjson.loads(line))
        return events
