"""The commands of ``kubectl dra``: ``why``, ``devices`` and ``simulate``, from either source.

From the cluster (kubeconfig), the objects are listed once per kind and explained in memory
(``local.Snapshot``). From an extender (``--extender URL``): ``why`` asks ``debug/why``; ``devices``
reads the device map's ``ui/api/nodes`` when the extender serves it (its states include binds in
flight and tentative holds; ``--node`` and ``-o wide`` read ``ui/api/nodes/{node}``, with each
claim's pods), else ``debug/nodes/{node}`` for every node named by
``debug/objects``; ``simulate`` rebuilds the cluster from ``debug/objects``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from extender.core.errors import ExtenderError
from extender.manifests import ManifestError, load_manifests

from .local import PodNotFound, Snapshot, device_rows
from .output import print_devices, print_document, print_simulation, print_why
from .sources import ExtenderClient, SourceError, cluster_objects

__all__ = ["FAILURES", "CommandError", "dispatch"]

#: Kinds a simulate manifest may hold (anything else is ignored with a warning).
SIMULATED_KINDS = frozenset(
    {"Namespace", "Node", "DeviceClass", "ResourceSlice", "ResourceClaimTemplate", "ResourceClaim", "Pod"}
)
#: Nodes per page of ``ui/api/nodes`` (the endpoint's maximum).
PAGE = 500


class CommandError(Exception):
    """The command cannot do what was asked; the message is the one line printed."""


#: What ``run`` turns into one line on stderr and exit code 1.
FAILURES: tuple[type[Exception], ...] = (CommandError, SourceError, PodNotFound, ManifestError)


async def dispatch(args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
    def warn(message: str) -> None:
        err.write(f"warning: {message}\n")

    if args.extender and (args.kubeconfig or args.context):
        raise CommandError("--extender and --kubeconfig/--context name two sources: give one")
    if args.command == "why":
        await _why(args, out, warn)
    elif args.command == "devices":
        await _devices(args, out, warn)
    else:
        await _simulate(args, out, warn)


# --- why ----------------------------------------------------------------------------------------


def _pod_key(args: argparse.Namespace) -> tuple[str, str]:
    text: str = args.pod
    if "/" in text:
        namespace, _, name = text.partition("/")
        if args.namespace and args.namespace != namespace:
            raise CommandError(f"the pod {text} names namespace {namespace}, but --namespace says {args.namespace}")
    else:
        namespace, name = args.namespace or "default", text
    if not namespace or not name or "/" in name:
        raise CommandError(f"not a pod name: {text!r} (give POD or NAMESPACE/POD)")
    return namespace, name


async def _why(args: argparse.Namespace, out: TextIO, warn: Any) -> None:
    namespace, name = _pod_key(args)
    if args.extender:
        async with _extender(args) as client:
            status, body = await client.get(f"debug/why/{namespace}/{name}")
            if status == 404:
                if isinstance(body, dict) and str(body.get("error", "")).startswith("pod "):
                    raise PodNotFound(f'pod "{name}" not found in namespace "{namespace}" (extender {client.base})')
                raise CommandError(f"the extender at {client.base} has no debug/why endpoint (too old?)")
            if status != 200:
                raise CommandError(_http_error(client.base, "debug/why", status, body))
            document = body
    else:
        snapshot = await _cluster_snapshot(args, warn)
        document = snapshot.why(namespace, name)
    if args.output in ("json", "yaml"):
        print_document(document, args.output, out)
    else:
        print_why(document, args.output == "wide", out)


# --- devices ------------------------------------------------------------------------------------


async def _devices(args: argparse.Namespace, out: TextIO, warn: Any) -> None:
    nodes: list[str] | None = args.node
    if args.extender:
        rows = await _extender_devices(args, nodes, warn)
    else:
        snapshot = await _cluster_snapshot(args, warn)
        if nodes:
            unknown = [n for n in nodes if n not in snapshot.node_names]
            if unknown:
                raise CommandError(f"node {unknown[0]} not found (no Node object and no ResourceSlice names it)")
        rows = device_rows(snapshot, nodes)
    if args.output in ("json", "yaml"):
        print_document({"kind": "DeviceList", "items": rows}, args.output, out)
    else:
        print_devices(rows, args.output == "wide", out)


async def _extender_devices(args: argparse.Namespace, nodes: list[str] | None, warn: Any) -> list[dict[str, Any]]:
    async with _extender(args) as client:
        rows = await _device_map_rows(client) if not nodes else None
        if rows is not None and args.output != "wide":
            return rows
        if rows is not None or (nodes and await _serves_device_map(client)):
            # the node details of the device map: attributes, capacity, and the pods of each claim
            wanted = nodes or sorted({row["node"] for row in rows or ()})
            return [row for name in wanted for row in await _device_map_node_rows(client, name)]
        if not nodes:
            listed = await client.document("debug/objects")
            names = {
                str((o.get("metadata") or {}).get("name")) for o in listed.get("items") or () if o.get("kind") == "Node"
            }
            names |= {
                str((o.get("spec") or {}).get("nodeName"))
                for o in listed.get("items") or ()
                if o.get("kind") == "ResourceSlice" and (o.get("spec") or {}).get("nodeName")
            }
            nodes = sorted(names)
        rows = []
        for node in nodes:
            detail = await client.document(f"debug/nodes/{node}")
            for device in detail.get("devices") or ():
                claims = [str(c) for c in device.get("claims") or ()]
                rows.append(
                    {
                        "node": node,
                        "driver": device.get("driver", ""),
                        "pool": device.get("pool", ""),
                        "device": device.get("device", ""),
                        "state": _state_of(claims),
                        "claims": sorted({c.split(" ", 1)[0] for c in claims}),
                        "pods": [],
                        "attributes": device.get("attributes") or {},
                        "capacity": device.get("capacity") or {},
                    }
                )
        return rows


async def _device_map_rows(client: ExtenderClient) -> list[dict[str, Any]] | None:
    """Every device through ``ui/api/nodes``, page by page; None when the extender lacks it."""
    rows: list[dict[str, Any]] = []
    offset = 0
    while True:
        status, body = await client.get("ui/api/nodes", {"offset": str(offset), "limit": str(PAGE)})
        if status == 404:
            return None
        if status != 200 or not isinstance(body, dict):
            raise CommandError(_http_error(client.base, "ui/api/nodes", status, body))
        page = body.get("nodes") or []
        for node in page:
            for device in node.get("devices") or ():
                rows.append(
                    {
                        "node": node.get("name", ""),
                        "driver": device.get("driver", ""),
                        "pool": device.get("pool", ""),
                        "device": device.get("name", ""),
                        "state": device.get("state", ""),
                        "claims": list(device.get("claims") or ()),
                        "pods": list(device.get("pods") or ()),
                        "attributes": device.get("attributes") or {},
                        "capacity": device.get("capacity") or {},
                    }
                )
        offset += len(page)
        if not page or offset >= int(body.get("total") or 0):
            return rows


async def _serves_device_map(client: ExtenderClient) -> bool:
    status, _ = await client.get("ui/api/summary")
    return status == 200


async def _device_map_node_rows(client: ExtenderClient, node: str) -> list[dict[str, Any]]:
    """One node's devices through ``ui/api/nodes/{node}`` (the extender serves the device map)."""
    status, body = await client.get(f"ui/api/nodes/{node}")
    if status == 404:
        raise CommandError(f"node {node} not found (the extender knows no such node)")
    if status != 200 or not isinstance(body, dict):
        raise CommandError(_http_error(client.base, f"ui/api/nodes/{node}", status, body))
    return [
        {
            "node": node,
            "driver": device.get("driver", ""),
            "pool": device.get("pool", ""),
            "device": device.get("name", ""),
            "state": device.get("state", ""),
            "claims": [str(c.get("claim", "")) for c in device.get("claims") or () if isinstance(c, dict)],
            "pods": list(device.get("pods") or ()),
            "attributes": device.get("attributes") or {},
            "capacity": device.get("capacity") or {},
        }
        for device in body.get("devices") or ()
    ]


def _state_of(claims: Sequence[str]) -> str:
    """debug/nodes marks in-flight holders with " (binding)" or " (held)"."""
    if not claims:
        return "free"
    if any(c.endswith("(binding)") for c in claims):
        return "binding"
    if all(c.endswith("(held)") for c in claims):
        return "held"
    return "allocated"


# --- simulate -----------------------------------------------------------------------------------


async def _simulate(args: argparse.Namespace, out: TextIO, warn: Any) -> None:
    manifests = _read_manifests(args.filename, args.namespace, warn)
    pods = [o for o in manifests if o.get("kind") == "Pod" and not (o.get("spec") or {}).get("nodeName")]
    if not pods:
        raise CommandError("the manifests hold no pod to schedule (a Pod without spec.nodeName)")
    if args.extender:
        async with _extender(args) as client:
            listed = await client.document("debug/objects")
        missing = (listed.get("metadata") or {}).get("incomplete")
        if missing:
            raise CommandError(f"the extender cannot list {', '.join(missing)}: simulate from the cluster instead")
        snapshot = Snapshot(listed.get("items") or [], warn=warn)
    else:
        snapshot = await _cluster_snapshot(args, warn)
    stored = snapshot.add(manifests, strict=True)
    stored_pods = [o for o in stored if o.get("kind") == "Pod" and not (o.get("spec") or {}).get("nodeName")]
    results = []
    for pod in stored_pods:
        try:
            node, document = await snapshot.place(pod)
        except ExtenderError as exc:
            node, document = None, {"pod": _key(pod), "uid": "", "error": exc.reason, "summary": exc.reason}
        entry: dict[str, Any] = {
            "pod": document["pod"],
            "node": node,
            "fits": document.get("fits", {"count": 0, "nodes": []}),
            "devices": snapshot.pod_devices(pod) if node else [],
            "summary": document.get("summary", ""),
            "error": document.get("error", ""),
        }
        if not node:
            entry["closest"] = document.get("closest", [])
            entry["suggestions"] = document.get("suggestions", [])
        results.append(entry)
    document = {"kind": "Simulation", "pods": results}
    if args.output in ("json", "yaml"):
        print_document(document, args.output, out)
    else:
        print_simulation(document, args.output == "wide", out)


def _read_manifests(paths: Sequence[str], namespace: str | None, warn: Any) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for path in paths:
        if path == "-":
            try:
                documents = list(yaml.safe_load_all(sys.stdin.read()))
            except yaml.YAMLError as exc:
                raise ManifestError(f"stdin: {' '.join(str(exc).split())}") from exc
            for document in documents:
                if isinstance(document, dict) and document.get("kind") == "List":
                    objects += [o for o in document.get("items") or () if isinstance(o, dict)]
                elif isinstance(document, dict):
                    objects.append(document)
                elif document is not None:
                    raise ManifestError("stdin: a document is not an object")
            continue
        if not Path(path).exists():
            raise ManifestError(f"{path}: no such file or directory")
        try:
            objects += load_manifests(path)
        except ManifestError as exc:
            raise ManifestError(" ".join(str(exc).split())) from exc
    kept: list[dict[str, Any]] = []
    for obj in objects:
        kind = obj.get("kind")
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or not meta.get("name"):
            raise ManifestError(f"a {kind or 'manifest'} without metadata.name")
        if kind not in SIMULATED_KINDS:
            warn(f"ignored {kind} {meta.get('name')}: simulate adds only DRA objects, nodes and pods")
            continue
        if kind in ("Pod", "ResourceClaim", "ResourceClaimTemplate") and not meta.get("namespace"):
            obj = {**obj, "metadata": {**meta, "namespace": namespace or "default"}}
        kept.append(obj)
    return kept


def _key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


# --- sources ------------------------------------------------------------------------------------


async def _cluster_snapshot(args: argparse.Namespace, warn: Any) -> Snapshot:
    return Snapshot(await cluster_objects(args.kubeconfig, args.context), warn=warn)


def _extender(args: argparse.Namespace) -> ExtenderClient:
    url: str = args.extender
    if not url.startswith(("http://", "https://")):
        raise CommandError(f"--extender needs an http:// or https:// URL, not {url!r}")
    return ExtenderClient(url, insecure=args.insecure_skip_tls_verify)


def _http_error(base: str, path: str, status: int, body: Any) -> str:
    message = body.get("error") if isinstance(body, dict) else None
    if status in (401, 403):
        return f"the extender at {base} refused {path} (HTTP {status}): {message or 'forbidden'}"
    return f"GET {base}{path}: HTTP {status}" + (f": {message}" if message else "")
