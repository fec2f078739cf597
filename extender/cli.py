"""The ``dra-extender`` command line.

``dra-extender serve --cluster PATH... | --demo`` runs the extender service over an embedded cluster
loaded from manifests. Every ``serve`` flag can also come from an environment variable
(``DRA_EXTENDER_`` + the flag's name in upper snake case, e.g. ``DRA_EXTENDER_LISTEN``); a flag on the
command line wins over its variable. ``dra-extender allocate PATH... --claim NS/NAME`` loads
manifests and shows, node by node, which devices the named claims would get, or why they do not fit.
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from extender import __version__
from extender.core.allocator import Allocation, Allocator
from extender.core.answers import Unresolvable
from extender.core.convert import encode_allocation_result
from extender.core.errors import ExtenderError, PodUnschedulable
from extender.core.explain import explain_node
from extender.core.model import (
    Features,
    ResourceClaim,
)
from extender.core.scoring import ScoringPolicy
from extender.logconfig import LOG_FORMATS, LOG_LEVELS, configure_logging
from extender.manifests import ManifestError, load_manifests
from extender.server.eventloop import EVENT_LOOPS, event_loop_name
from extender.server.settings import DEFAULT_MAX_BODY_BYTES, ServerSettings, parse_listen, ssl_context
from extender.state.cache.store import KINDS, ObjectStore

if TYPE_CHECKING:
    from extender.backends.kube import KubeBackend

__all__ = ["main"]


def _load(paths: Sequence[str]) -> ObjectStore:
    """The manifests' DRA objects, nodes and pods in an ObjectStore; other kinds are skipped."""
    store = ObjectStore()
    for raw in load_manifests(*paths):
        if raw.get("kind") in KINDS:
            store.upsert(raw)
    return store


def _allocate(args: argparse.Namespace) -> int:
    try:
        store = _load(args.paths)
    except (ManifestError, ExtenderError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    wanted: list[ResourceClaim] = []
    for key in args.claim:
        key = key if "/" in key else f"default/{key}"
        claim = store.claims.get(key)
        if claim is None:
            print(f"error: claim {key} not found in the manifests", file=sys.stderr)
            return 2
        if claim.allocation is not None:
            print(f"error: claim {key} is already allocated", file=sys.stderr)
            return 2
        wanted.append(claim)
    # Nodes named by slices but not listed in the files match by name only (no labels known).
    nodes = [store.node(n) for n in (args.node or store.known_node_names())]
    features = Features()
    allocated = store.allocated_state()  # every allocated claim holds its devices
    allocator = Allocator(
        wanted,
        classes=store.classes,
        snapshot=store.snapshot(),
        allocated=allocated,
        features=features,
        selectors=store.selectors,
    )
    report: list[dict[str, Any]] = []
    fits_somewhere = False
    for node in nodes:
        try:
            answer = allocator.answer(node)
        except PodUnschedulable as exc:
            print(f"error: {exc.reason}", file=sys.stderr)
            return 2
        if isinstance(answer, Allocation):
            allocation = answer
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
            snapshot=allocator.snapshot,
            classes=store.classes,
            allocated=allocated,
            features=features,
            selectors=store.selectors,
        )
        entry = explanation.to_dict()
        entry["fits"] = False
        if isinstance(answer, Unresolvable):
            entry["unresolvable"] = answer.reason
        report.append(entry)
    if args.priority is not None:
        _add_victims(store, wanted, args.priority, report)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        _print_report(report)
    return 0 if fits_somewhere else 1


def _add_victims(store: ObjectStore, wanted: list[ResourceClaim], priority: int, report: list[dict[str, Any]]) -> None:
    """For a pod of ``priority`` with these claims: on each node where they do not fit, the running
    pods of the manifests that would have to go (device-aware preemption's choice; nobody is
    evicted). ``victims`` is None where no set of lower-priority pods frees enough."""
    from extender.backends.embedded import EmbeddedBackend
    from extender.state.cache.claims import PodClaims
    from extender.state.cache.cluster import ClusterView
    from extender.state.cache.ledger import InFlightLedger
    from extender.state.preemption.devices import DevicePreemption

    preemption = DevicePreemption(ClusterView(EmbeddedBackend(store=store), InFlightLedger(), Features()))
    claims = PodClaims(pod_key="(allocate)", pod_uid="", to_allocate=list(wanted), priority=priority)
    unfit = [entry["node"] for entry in report if not entry["fits"] and "unresolvable" not in entry]
    for node, found in preemption.victims_for(claims, unfit).items():
        entry = next(e for e in report if e["node"] == node)
        if isinstance(found, str):
            entry["victims"], entry["preemption"] = [], found
        elif found is None:
            entry["victims"], entry["preemption"] = None, "no set of lower-priority pods frees enough devices"
        else:
            entry["victims"] = [{"pod": v.key, "priority": v.priority} for v in found]
            entry["preemption"] = f"{len(found)} pod(s) of lower priority would have to go"


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
            if "preemption" in entry:
                victims = ", ".join(f"{v['pod']} (priority {v['priority']})" for v in entry["victims"] or ())
                print(f"  preemption: {entry['preemption']}" + (f": {victims}" if victims else ""))


# --- serve ------------------------------------------------------------------------------------------

#: The demo cluster ships in the repository (deploy/examples), not inside the installed package.
DEMO_CLUSTER = Path(__file__).resolve().parents[1] / "deploy" / "examples" / "demo-cluster.yaml"
#: binpack keeps whole nodes free for big jobs; prioritized is upstream's DynamicResources score
#: (earlier firstAvailable alternatives win). Same default as SchedulingService.
DEFAULT_SCORING = "binpack=1,prioritized=1"
ENV_PREFIX = "DRA_EXTENDER_"
_TRUE = frozenset({"1", "true", "yes", "on"})


def _env(flag: str) -> str:
    """The variable of a flag: ``--tls-cert-file`` -> ``DRA_EXTENDER_TLS_CERT_FILE``."""
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def _checked(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type`` that keeps our ValueError text in the usage error."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc

    convert.__name__ = parse.__name__
    return convert


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(f"must be a positive integer, not {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"must not be negative, not {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise ValueError(f"must be a positive number of seconds, not {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise ValueError(f"must not be negative, not {text}")
    return value


def _at_least_one(text: str) -> float:
    value = float(text)
    if not value >= 1:
        raise ValueError("must be at least 1 second")
    return value


def _add_serve(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the extender service",
        description="Run the kube-scheduler extender over an embedded cluster (--cluster, --demo) or a "
        "Kubernetes cluster (--kubeconfig, or the in-cluster service account). Every flag can also be set "
        f"with an environment variable {ENV_PREFIX}<FLAG> (e.g. {_env('--listen')}); flags win.",
    )

    def option(flag: str, default: str | None, help_text: str, **kwargs: Any) -> None:
        env = _env(flag)
        serve.add_argument(flag, default=os.environ.get(env, default), help=f"{help_text} [env {env}]", **kwargs)

    source = serve.add_argument_group("cluster (one of)")
    source.add_argument(
        "--cluster",
        action="append",
        metavar="PATH",
        help="manifest file (YAML/JSON, multi-document, kind: List) or directory; repeatable "
        f"[env {_env('--cluster')}, paths separated by {os.pathsep!r}]",
    )
    source.add_argument(
        "--demo",
        action="store_true",
        default=None,
        help=f"serve the demo cluster {DEMO_CLUSTER.name} [env {_env('--demo')}=1]",
    )
    source.add_argument(
        "--kubeconfig",
        default=os.environ.get(_env("--kubeconfig")),
        metavar="PATH",
        help="a real cluster through this kubeconfig; with no --cluster, --demo or --kubeconfig the "
        f"in-cluster service account is used [env {_env('--kubeconfig')}]",
    )
    kube = serve.add_argument_group("Kubernetes backend")

    def kube_option(flag: str, default: str | None, help_text: str, **kwargs: Any) -> None:
        env = _env(flag)
        kube.add_argument(flag, default=os.environ.get(env, default), help=f"{help_text} [env {env}]", **kwargs)

    kube_option("--context", None, "kubeconfig context (default: the current one)")
    kube_option(
        "--lease-name",
        None,
        "follow this kube-scheduler leader-election Lease and refuse binds unless its holder is this "
        "pod (the sidecar model); unset: always bind",
    )
    kube_option("--lease-namespace", "kube-system", "namespace of --lease-name (default %(default)s)")
    kube.add_argument(
        "--no-classic-dra",
        dest="classic_dra",
        action="store_false",
        default=os.environ.get(_env("--no-classic-dra"), "") in ("", "0"),
        help="never watch or write PodSchedulingContexts, even where the API server serves classic DRA "
        f"(Kubernetes 1.31 with DRAControlPlaneController; docs/classic-dra.md) [env {_env('--no-classic-dra')}=1]",
    )
    kube_option(
        "--requeue-rate",
        "5",
        "pods per second at most to nudge back into the scheduling queue when devices free up; 0 turns "
        "fast requeue off (default %(default)s)",
        type=_checked(_non_negative_float),
    )
    option(
        "--listen",
        "127.0.0.1:8888",
        "HOST:PORT to listen on (default %(default)s)",
        type=_checked(parse_listen),
        metavar="HOST:PORT",
    )
    option("--path-prefix", "/", "serve every route under this path, e.g. /v1 (default %(default)s)")
    option(
        "--scoring",
        DEFAULT_SCORING,
        "prioritize policy: name[=weight],... of binpack, spread, prioritized, "
        "topology:<attribute> (default %(default)s)",
        type=_checked(ScoringPolicy.parse),
    )
    option(
        "--hold-seconds",
        "2",
        "how long filter (one node left) and prioritize (its best node) hold the pod's devices on "
        "that node for the bind kube-scheduler sends next; 0 turns holds off (default %(default)s)",
        type=_checked(_non_negative_float),
    )
    serve.add_argument(
        "--filter-picks-node",
        action="store_true",
        default=os.environ.get(_env("--filter-picks-node"), "").lower() in _TRUE,
        help="answer the filter of a pod with no soft scheduling preferences of its own with the one node "
        "prioritize would rank first, so that kube-scheduler binds it without scoring the nodes "
        "(docs/configuration.md; deploy/large-cluster) "
        f"[env {_env('--filter-picks-node')}=1]",
    )
    option(
        "--claim-wait-seconds",
        "15",
        "how long a bind waits for the resourceclaim controller to create the pod's template claims "
        "(default %(default)s; never past the bind deadline's write window)",
        type=_checked(_non_negative_float),
    )
    option(
        "--binding-timeout-seconds",
        "600",
        "how long a pod's allocated devices may wait for their binding conditions (KEP-5007) before "
        "they are deallocated and the pod scheduled afresh, as kube-scheduler's bindingTimeout "
        "(default %(default)s; at least 1)",
        type=_checked(_at_least_one),
    )
    option(
        "--binding-wait-seconds",
        "20",
        "how long one bind waits for a device's binding conditions before it answers Error and leaves "
        "the binding to the pod's next attempt; keep it below the bind deadline "
        "(default %(default)s)",
        type=_checked(_non_negative_float),
    )
    option(
        "--filter-timeout-seconds",
        "10",
        "how long the allocator may search one node for a pod's devices before the attempt answers "
        "Error ('node N: timed out trying to allocate devices'), as kube-scheduler's filterTimeout; "
        "0: no limit (default %(default)s)",
        type=_checked(_non_negative_float),
    )
    serve.add_argument(
        "--no-device-preemption",
        dest="device_preemption",
        action="store_false",
        default=os.environ.get(_env("--no-device-preemption"), "") in ("", "0"),
        help="never evict lower-priority pods to free devices for a pod no node fits (docs/preemption.md) "
        f"[env {_env('--no-device-preemption')}=1]",
    )
    option(
        "--gang-hold-seconds",
        "60",
        "how long a gang's planned devices stay held for members whose binds have not come (a pass "
        "that never binds; docs/gangs.md) (default %(default)s)",
        type=_checked(_positive_float),
    )
    option(
        "--gang-retry-backoff",
        "3",
        "after this many unchanged passes of a gang that does not fit, answer its members Error so "
        "that kube-scheduler backs off (1-10 s) instead of retrying back to back; 0: never (docs/gangs.md) "
        "(default %(default)s)",
        type=_checked(_non_negative_int),
    )
    option(
        "--gang-barrier-seconds",
        "3",
        "how long the binds of a gang's members wait for each other: no member is bound before every "
        "member's claims are written, and a failure undoes them all; members whose binds have not come "
        "by then are left to bind alone; 0: every member binds on its own (docs/gangs.md) (default %(default)s)",
        type=_checked(_non_negative_float),
    )
    serve.add_argument(
        "--no-gangs",
        dest="gangs",
        action="store_false",
        default=os.environ.get(_env("--no-gangs"), "") in ("", "0"),
        help="ignore PodGroups (scheduling.k8s.io): every pod is scheduled on its own, as kube-scheduler's "
        f"per-pod calls ask (docs/gangs.md) [env {_env('--no-gangs')}=1]",
    )
    option(
        "--preempt-timeout-seconds",
        "4",
        "the preempt verb's time budget: it decides nodes for 80%% of it, those with the fewest victims "
        "first, and leaves out the nodes it has not reached; keep it below kube-scheduler's httpTimeout "
        "for the extender (default %(default)s)",
        type=_checked(_positive_float),
    )
    option(
        "--bind-deadline-seconds",
        "25",
        "the whole time one bind may take: reading the pod, waiting for template claims, the claim "
        "writes with their retries, the binding, and undoing a failure; keep it below kube-scheduler's "
        "httpTimeout for the extender (30s in deploy/) (default %(default)s)",
        type=_checked(_positive_float),
    )
    option(
        "--max-body-bytes",
        str(DEFAULT_MAX_BODY_BYTES),
        "largest request body accepted, larger ones get HTTP 413; the default 64 MiB holds a "
        "filter request with ~5000 full Node objects (default %(default)s)",
        type=_checked(_positive_int),
    )
    option(
        "--log-format",
        "auto",
        "json, console, or auto: console on a terminal (default %(default)s)",
        choices=LOG_FORMATS,
    )
    option("--log-level", "info", "debug, info, warning, error (default %(default)s)", choices=LOG_LEVELS)
    option("--tls-cert-file", None, "serve HTTPS with this PEM certificate chain (needs --tls-key-file)")
    option("--tls-key-file", None, "PEM private key of --tls-cert-file")
    option("--tls-client-ca-file", None, "require client certificates signed by this CA (mutual TLS)")
    option(
        "--event-loop",
        "auto",
        "auto (uvloop if installed, else asyncio), uvloop or asyncio (default %(default)s)",
        choices=EVENT_LOOPS,
    )
    serve.set_defaults(func=_serve)


def _cluster_paths(args: argparse.Namespace) -> list[str]:
    """The manifests to serve; ValueError with a usage message if none or both sources are given."""
    clusters = args.cluster
    if clusters is None:
        clusters = [p for p in os.environ.get(_env("--cluster"), "").split(os.pathsep) if p]
    demo = args.demo if args.demo is not None else os.environ.get(_env("--demo"), "").lower() in _TRUE
    if demo and clusters:
        raise ValueError("give either --cluster or --demo, not both")
    if args.kubeconfig and (demo or clusters):
        raise ValueError("give one cluster source: --cluster, --demo or --kubeconfig")
    if demo:
        if not DEMO_CLUSTER.is_file():
            raise ValueError(
                f"--demo serves {DEMO_CLUSTER}, which is missing: the demo cluster ships with the source "
                "repository, not the installed package; run from a checkout or use --cluster PATH"
            )
        return [str(DEMO_CLUSTER)]
    if not clusters and not args.kubeconfig and not _kubernetes_reachable_by_default():
        raise ValueError(
            "serve needs a cluster: --cluster PATH (repeatable), --demo, --kubeconfig PATH, "
            "or run inside a pod (in-cluster configuration)"
        )
    return list(clusters)  # empty: the Kubernetes backend (kubeconfig or in-cluster)


def _kubernetes_reachable_by_default() -> bool:
    """Whether credentials can be found without --kubeconfig: in a pod, $KUBECONFIG, ~/.kube/config."""
    if os.environ.get("KUBERNETES_SERVICE_HOST") or os.environ.get("KUBECONFIG"):
        return True
    return (Path.home() / ".kube" / "config").is_file()


def _serve(args: argparse.Namespace) -> int:
    # Imported here: the server stack (aiohttp, prometheus) is not needed by ``allocate``.
    from extender.backends.base import Backend
    from extender.backends.embedded import EmbeddedBackend
    from extender.server.app import create_app, run
    from extender.state.service import SchedulingService, check_gang_barrier

    try:
        check_gang_barrier(args.gang_barrier_seconds, args.bind_deadline_seconds)
        paths = _cluster_paths(args)
        host, port = args.listen
        settings = ServerSettings(
            path_prefix=args.path_prefix,
            max_body_bytes=args.max_body_bytes,
            host=host,
            port=port,
            tls_cert_file=args.tls_cert_file or None,
            tls_key_file=args.tls_key_file or None,
            tls_client_ca_file=args.tls_client_ca_file or None,
            event_loop=args.event_loop,
        )
        event_loop_name(settings.event_loop)  # uvloop asked for but missing: say so before loading
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        ssl_context(settings)  # fail now, with a clear message, not inside the event loop
    except (OSError, ssl.SSLError) as exc:
        print(f"error: TLS files: {exc}", file=sys.stderr)
        return 2
    try:
        configure_logging(args.log_format, args.log_level)  # env values skip argparse's choices check
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rejected = None
    backend: Backend
    if paths:
        try:
            backend = EmbeddedBackend.from_paths(*paths, gangs=args.gangs)
        except (ManifestError, ExtenderError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    else:
        kube = _kube_backend(args)
        rejected = kube.rejected  # one registry: the device map's pending list and the fast requeue
        backend = kube
    service = SchedulingService(
        backend=backend,
        scoring=args.scoring,
        rejected=rejected,
        hold_seconds=args.hold_seconds,
        claim_wait_seconds=args.claim_wait_seconds,
        binding_timeout_seconds=args.binding_timeout_seconds,
        binding_wait_seconds=args.binding_wait_seconds,
        bind_deadline_seconds=args.bind_deadline_seconds,
        filter_timeout_seconds=args.filter_timeout_seconds,
        preemption=args.device_preemption,
        preempt_timeout_seconds=args.preempt_timeout_seconds,
        gang_hold_seconds=args.gang_hold_seconds,
        gang_retry_backoff=args.gang_retry_backoff,
        gang_barrier_seconds=args.gang_barrier_seconds,
        filter_picks_node=args.filter_picks_node,
    )
    try:
        run(create_app(service, settings))
    except ExtenderError as exc:  # the backend could not start (unreachable, forbidden, unserved API)
        print(f"error: {exc.reason}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 2
    return 0


def _kube_backend(args: argparse.Namespace) -> KubeBackend:
    from extender.backends.kube import KubeBackend, KubeSettings, LeaseSettings, RequeueSettings

    settings = KubeSettings(
        lease=LeaseSettings(name=args.lease_name, namespace=args.lease_namespace) if args.lease_name else None,
        requeue=RequeueSettings(rate_per_second=args.requeue_rate) if args.requeue_rate > 0 else None,
        classic=args.classic_dra,
        gangs=args.gangs,
    )
    return KubeBackend.from_kubeconfig(
        args.kubeconfig or None, context=args.context or None, in_cluster=None, settings=settings
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dra-extender", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"dra-extender {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    allocate = commands.add_parser("allocate", help="show where claims from manifest files would be allocated")
    allocate.add_argument("paths", nargs="+", metavar="PATH", help="manifest file or directory")
    allocate.add_argument("--claim", action="append", required=True, metavar="NS/NAME", help="claim to allocate")
    allocate.add_argument("--node", action="append", default=[], metavar="NODE", help="only try these nodes")
    allocate.add_argument("--json", action="store_true", help="print JSON instead of text")
    allocate.add_argument(
        "--priority",
        type=int,
        metavar="N",
        help="for a pod of this priority: on nodes where the claims do not fit, which running pods of the "
        "manifests would have to go (device-aware preemption's choice; nothing is evicted)",
    )
    allocate.set_defaults(func=_allocate)
    _add_serve(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
