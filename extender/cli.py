"""The ``dra-extender`` command line.

``dra-extender allocate PATH... --claim NS/NAME`` loads manifests and shows, node by node, which devices
the named claims would get, or why they do not fit. The service (``serve``) comes with the server layer.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import orjson

from extender import __version__
from extender.core.allocator import Allocator
from extender.core.cel import SelectorCache
from extender.core.convert import decode_object, encode_allocation_result
from extender.core.errors import ExtenderError, NodeUnresolvable, PodUnschedulable
from extender.core.explain import explain_node
from extender.core.model import (
    AllocatedState,
    DeviceClass,
    Features,
    NodeInfo,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from extender.core.pools import SliceSnapshot
from extender.manifests import ManifestError, load_manifests

__all__ = ["main"]

#: Kinds a cluster dump holds that the allocator has no use for; skipped without complaint.
_IGNORED_KINDS = frozenset({"Namespace", "Pod", "Deployment", "ConfigMap", "Service", "ServiceAccount"})


class _Cluster:
    def __init__(self) -> None:
        self.classes: dict[str, DeviceClass] = {}
        self.claims: dict[str, ResourceClaim] = {}
        self.slices: list[ResourceSlice] = []
        self.nodes: dict[str, NodeInfo] = {}


def _load(paths: Sequence[str]) -> _Cluster:
    cluster = _Cluster()
    for raw in load_manifests(*paths):
        if raw.get("kind") in _IGNORED_KINDS:
            continue
        obj = decode_object(raw)
        if isinstance(obj, DeviceClass):
            cluster.classes[obj.name] = obj
        elif isinstance(obj, ResourceClaim):
            cluster.claims[obj.key] = obj
        elif isinstance(obj, ResourceSlice):
            cluster.slices.append(obj)
        elif isinstance(obj, NodeInfo):
            cluster.nodes[obj.name] = obj
        elif isinstance(obj, ResourceClaimTemplate):
            pass  # templates need the resourceclaim controller; nothing to allocate directly
    for s in cluster.slices:  # nodes named by slices but not listed: no labels known
        if s.node_name and s.node_name not in cluster.nodes:
            cluster.nodes[s.node_name] = NodeInfo(s.node_name)
    return cluster


def _allocate(args: argparse.Namespace) -> int:
    try:
        cluster = _load(args.paths)
    except (ManifestError, ExtenderError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    wanted: list[ResourceClaim] = []
    for key in args.claim:
        key = key if "/" in key else f"default/{key}"
        claim = cluster.claims.get(key)
        if claim is None:
            print(f"error: claim {key} not found in the manifests", file=sys.stderr)
            return 2
        if claim.allocation is not None:
            print(f"error: claim {key} is already allocated", file=sys.stderr)
            return 2
        wanted.append(claim)
    allocated = AllocatedState()
    for key, claim in cluster.claims.items():
        if claim.allocation is not None and all(key != w.key for w in wanted):
            allocated.add_allocation(claim.allocation)
    nodes = [cluster.nodes[n] if n in cluster.nodes else NodeInfo(n) for n in args.node] or sorted(
        cluster.nodes.values(), key=lambda n: n.name
    )
    features = Features()
    snapshot = SliceSnapshot(cluster.slices)
    selectors = SelectorCache()
    allocator = Allocator(
        wanted, classes=cluster.classes, snapshot=snapshot, allocated=allocated, features=features, selectors=selectors
    )
    report: list[dict[str, Any]] = []
    fits_somewhere = False
    for node in nodes:
        unresolvable: str | None = None
        try:
            allocation = allocator.allocate(node)
        except NodeUnresolvable as exc:
            allocation, unresolvable = None, exc.reason
        except PodUnschedulable as exc:
            print(f"error: {exc.reason}", file=sys.stderr)
            return 2
        if allocation is not None:
            fits_somewhere = True
            report.append(
                {
                    "node": node.name,
                    "fits": True,
                    "claims": {
                        claim.key: encode_allocation_result(result, "resource.k8s.io/v1")
                        for claim, result in zip(wanted, allocation.results, strict=True)
                    },
                }
            )
            continue
        explanation = explain_node(
            wanted,
            node,
            snapshot=snapshot,
            classes=cluster.classes,
            allocated=allocated,
            features=features,
            selectors=selectors,
        )
        entry = explanation.to_dict()
        entry["fits"] = False
        if unresolvable:
            entry["unresolvable"] = unresolvable
        report.append(entry)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        _print_report(report)
    return 0 if fits_somewhere else 1


def _print_report(report: list[dict[str, Any]]) -> None:
    for entry in report:
        if entry["fits"]:
            print(f"{entry['node']}: fits")
            for claim, allocation in entry["claims"].items():
                for result in allocation["devices"]["results"]:
                    device = f"{result['driver']}/{result['pool']}/{result['device']}"
                    print(f"  {claim} {result['request']} -> {device}")
        else:
            print(f"{entry['node']}: does not fit: {entry.get('message', '')}")
            for claim in entry.get("claims", []):
                for request in claim.get("requests", []):
                    print(f"  {claim.get('claim')} {request.get('request')}: {request.get('message')}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dra-extender", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"dra-extender {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    allocate = commands.add_parser("allocate", help="show where claims from manifest files would be allocated")
    allocate.add_argument("paths", nargs="+", metavar="PATH", help="manifest file or directory")
    allocate.add_argument("--claim", action="append", required=True, metavar="NS/NAME", help="claim to allocate")
    allocate.add_argument("--node", action="append", default=[], metavar="NODE", help="only try these nodes")
    allocate.add_argument("--json", action="store_true", help="print JSON instead of text")
    allocate.set_defaults(func=_allocate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
