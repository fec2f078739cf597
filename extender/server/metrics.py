"""Prometheus metrics of one app, in the app's own ``CollectorRegistry`` (tests build many apps).

Two kinds:

- events, counted as they happen by the handlers: verb latency, nodes passed/failed per filter,
  binds by outcome and error class, errors answered per verb;
- state, read at scrape time by ``_StateCollector`` from the service: allocations made, ledger
  size, cache sizes, CEL compile and result-cache hits and misses, remembered-verdict (fit cache)
  hits, misses and drops, readiness. Nothing polls.

Label values are bounded: verbs are fixed names, reasons are error class names. Handlers reach a
labelled series through ``Labelled`` (``metrics.binds_by("bound", "")``), which remembers each child:
``Counter.labels`` re-checks, re-stringifies and takes a lock on every call. A series still appears
only once it is first used.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterator
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from extender.state.preemption.verb import OUTCOMES as PREEMPT_VERB_OUTCOMES
from extender.state.service import SchedulingService

__all__ = ["NAMESPACE", "Labelled", "Metrics"]

NAMESPACE = "dra_extender"

#: Verb latencies: a warm filter is sub-millisecond; a bind does several writes; the scheduler's
#: default extender timeout is 5 s, so buckets stop there.
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: Node counts per filter: up to the 5000-node clusters the body limit is sized for.
_NODE_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)

M = TypeVar("M", bound=MetricWrapperBase)


class Labelled(Generic[M]):
    """``labelled(*values)`` is ``metric.labels(*values)``, looked up once per distinct label values."""

    __slots__ = ("_children", "_metric")

    def __init__(self, metric: M) -> None:
        self._metric: M = metric
        self._children: dict[tuple[str, ...], M] = {}

    def __call__(self, *values: str) -> M:
        try:
            return self._children[values]
        except KeyError:
            child: M = self._metric.labels(*values)
            self._children[values] = child
            return child


class Metrics:
    """The app's metric families; ``registry`` is what ``/metrics`` renders."""

    def __init__(self, service: SchedulingService) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.request_seconds = Histogram(
            "request_duration_seconds",
            "Time to answer an extender or debug request, by verb.",
            ["verb"],
            namespace=NAMESPACE,
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.filter_nodes = Counter(
            "filter_nodes",
            "Nodes judged by filter, by result (passed, failed, unresolvable).",
            ["result"],
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.filter_passed = Histogram(
            "filter_passed_nodes",
            "Nodes that passed, per filter request.",
            namespace=NAMESPACE,
            buckets=_NODE_BUCKETS,
            registry=self.registry,
        )
        self.filter_failed = Histogram(
            "filter_failed_nodes",
            "Nodes that failed (FailedNodes + FailedAndUnresolvableNodes), per filter request.",
            namespace=NAMESPACE,
            buckets=_NODE_BUCKETS,
            registry=self.registry,
        )
        self.binds = Counter(
            "binds",
            "Bind requests by outcome (bound, error) and reason (the error class name; empty when bound).",
            ["outcome", "reason"],
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.errors = Counter(
            "verb_errors",
            "Verb requests answered with Error (or, for prioritize, no scores), by verb and error class.",
            ["verb", "reason"],
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.bad_requests = Counter(
            "bad_requests",
            "Requests refused as malformed (HTTP 400/404/405/413), by status code.",
            ["code"],
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.connections = Counter(
            "http_connections",
            "Client connections that carried at least one request. kube-scheduler keeps two idle "
            "connections to an extender and opens one for each request beyond them.",
            namespace=NAMESPACE,
            registry=self.registry,
        )
        # the connections counted already (their TLS objects or transports, weakly: one leaves as it closes)
        self._connections_seen: weakref.WeakSet[object] = weakref.WeakSet()
        self.registry.register(_StateCollector(service))
        self.request_seconds_by = Labelled(self.request_seconds)
        self.filter_nodes_by = Labelled(self.filter_nodes)
        self.binds_by = Labelled(self.binds)
        self.errors_by = Labelled(self.errors)
        self.bad_requests_by = Labelled(self.bad_requests)

    def count_connection(self, transport: asyncio.BaseTransport) -> None:
        """A request arrived on ``transport``: counted once per connection. A connection is known
        by its TLS object where it has one (uvloop's TLS transports cannot be weakly referenced),
        else by its transport; one that can be known by neither is not counted (a metric never
        fails a request)."""
        connection = transport.get_extra_info("ssl_object") or transport
        seen = self._connections_seen
        try:
            if connection in seen:
                return
            seen.add(connection)
        except TypeError:
            return
        self.connections.inc()

    def observe_filter(self, *, passed: int, failed: int, unresolvable: int) -> None:
        by = self.filter_nodes_by
        by("passed").inc(passed)
        by("failed").inc(failed)
        by("unresolvable").inc(unresolvable)
        self.filter_passed.observe(passed)
        self.filter_failed.observe(failed + unresolvable)


class _StateCollector(Collector):
    """Gauges and counters read from the service when Prometheus scrapes."""

    def __init__(self, service: SchedulingService) -> None:
        self._service = service

    def describe(self) -> list[Metric]:
        return []  # families are only known at collect time; skip the describe-time collect

    def collect(self) -> Iterator[Metric]:
        service = self._service
        store = service.store
        ready = GaugeMetricFamily(f"{NAMESPACE}_ready", "1 once the backend's caches have synced and been warmed.")
        ready.add_metric([], 1.0 if service.backend.synced and service.warmed else 0.0)
        yield ready
        allocations = CounterMetricFamily(f"{NAMESPACE}_allocations", "Claims allocated by successful binds.")
        allocations.add_metric([], service.stats.allocations)
        yield allocations
        ledger = GaugeMetricFamily(
            f"{NAMESPACE}_ledger_entries", "Claim allocations in flight (bind decided, not yet seen)."
        )
        ledger.add_metric([], len(service.ledger))
        yield ledger
        stats = service.stats
        for name, help_text, counts, outcomes in (
            (
                "holds",
                "Tentative holds of a pod's devices on the node it is expected to be bound to, by what "
                "became of them: placed, kept (bind chose that node), moved (bind chose another), dropped "
                "(the pod's next attempt), expired.",
                stats.holds,
                ("placed", "kept", "moved", "dropped", "expired"),
            ),
            (
                "replaced_claims",
                "Template claims the resourceclaim controller replaced with another (kubernetes#140217), by "
                "outcome: moved (their devices moved to the new claim during the bind), moved_after_binding "
                "(after it), failed (a move after the binding that could not be written).",
                stats.replaced_claims,
                ("moved", "moved_after_binding", "failed"),
            ),
            (
                "gang_plans",
                "Joint plans of a gang's devices (docs/gangs.md), by outcome: found, greedy (the search "
                "budget spent, one member at a time placed enough), infeasible, budget (spent, and greedy "
                "did not place enough), remembered (an unchanged infeasible gang answered from memory).",
                stats.gang_plans,
                ("found", "greedy", "infeasible", "budget", "remembered"),
            ),
            (
                "gang_barrier",
                "Rounds of a gang's binds at the bind barrier (docs/gangs.md), by outcome: opened (every "
                "member's claims written, the bindings sent), partial (closed without members whose binds "
                "never came), aborted (a member failed before its binding: every member's writes undone).",
                stats.gang_barrier,
                ("opened", "partial", "aborted"),
            ),
        ):
            by_outcome = CounterMetricFamily(f"{NAMESPACE}_{name}", help_text, labels=["outcome"])
            for outcome in outcomes:  # every outcome exported, 0 until it happens
                by_outcome.add_metric([outcome], counts.get(outcome, 0))
            yield by_outcome
        scalars: tuple[tuple[type[CounterMetricFamily | GaugeMetricFamily], str, str, float], ...] = (
            (
                CounterMetricFamily,
                "hold_age_seconds",
                "Seconds from a hold to its pod's bind, summed over the binds that found a hold.",
                stats.hold_age_seconds,
            ),
            (
                GaugeMetricFamily,
                "hold_age_max_seconds",
                "The longest a hold waited for its pod's bind so far.",
                stats.hold_age_max_seconds,
            ),
            (CounterMetricFamily, "holds_settled", "Binds that found a hold of their pod.", stats.holds_settled),
            (
                CounterMetricFamily,
                "bind_claim_waits",
                "Binds that waited for the resourceclaim controller to create claims.",
                stats.claim_waits,
            ),
            (
                CounterMetricFamily,
                "bind_claim_wait_seconds",
                "Seconds binds waited for template claims to be created, summed.",
                stats.claim_wait_seconds,
            ),
            (
                CounterMetricFamily,
                "bind_claim_decisions_kept",
                "Binds that waited for template claims and kept the devices they had decided before the wait.",
                stats.claim_decisions_kept,
            ),
            (
                CounterMetricFamily,
                "filter_picks",
                "Filter answers that named only the node the extender ranks first (--filter-picks-node).",
                stats.filter_picks,
            ),
        )
        for family, name, text, value in scalars:
            metric = family(f"{NAMESPACE}_{name}", text)
            metric.add_metric([], value)
            yield metric
        yield from _classic_metrics(service)
        yield from _preemption_metrics(service)
        cache = GaugeMetricFamily(f"{NAMESPACE}_cache_objects", "Objects held in the cache, by kind.", labels=["kind"])
        for kind, size in (
            ("slices", len(store.slices)),
            ("devices", store.device_count()),
            ("claims", len(store.claims)),
            ("classes", len(store.classes)),
            ("templates", len(store.templates)),
            ("nodes", len(store.nodes)),
            ("pods", len(store.pods)),
            ("podschedulingcontexts", len(store.scheduling_contexts)),
        ):
            cache.add_metric([kind], size)
        yield cache
        cel = store.selectors.stats
        compiles = CounterMetricFamily(
            f"{NAMESPACE}_cel_compile_cache", "CEL compile-cache lookups, by result.", labels=["result"]
        )
        compiles.add_metric(["hit"], cel.compile_hits)
        compiles.add_metric(["miss"], cel.compile_misses)
        yield compiles
        results = CounterMetricFamily(
            f"{NAMESPACE}_cel_result_cache", "CEL selector result-cache lookups, by result.", labels=["result"]
        )
        results.add_metric(["hit"], cel.result_hits)
        results.add_metric(["miss"], cel.result_misses)
        yield results
        fits = store.fits
        lookups = CounterMetricFamily(
            f"{NAMESPACE}_fit_cache",
            "Per-node verdict lookups of filter and prioritize, by result (a miss runs the allocator).",
            labels=["result"],
        )
        lookups.add_metric(["hit"], fits.stats.hits)
        lookups.add_metric(["miss"], fits.stats.misses)
        yield lookups
        dropped = CounterMetricFamily(
            f"{NAMESPACE}_fit_cache_dropped", "Remembered node verdicts dropped because an input changed."
        )
        dropped.add_metric([], fits.stats.dropped)
        yield dropped
        held = GaugeMetricFamily(f"{NAMESPACE}_fit_cache_verdicts", "Node verdicts remembered, over all pod shapes.")
        held.add_metric([], len(fits))
        yield held


def _classic_metrics(service: SchedulingService) -> Iterator[Metric]:
    """Classic DRA: the negotiation with drivers' controllers (``state/classic.py``)."""
    stats = service.classic.stats
    publishes = CounterMetricFamily(
        f"{NAMESPACE}_classic_context_writes",
        "PodSchedulingContext writes, by the field set: potentialNodes, selectedNode, cleared (selectedNode unset).",
        labels=["field"],
    )
    for name in ("potentialNodes", "selectedNode", "cleared"):
        publishes.add_metric([name], stats.publishes.get(name, 0))
    yield publishes
    failures = CounterMetricFamily(
        f"{NAMESPACE}_classic_publish_failures",
        "Asynchronous potentialNodes publishes that failed (logged), by error class.",
        labels=["error"],
    )
    for name, count in sorted(stats.publish_failures.items()):
        failures.add_metric([name], count)
    yield failures
    for name, text, value in (
        ("classic_bind_waits", "Binds that waited for drivers to allocate classic claims.", stats.waits),
        ("classic_bind_wait_seconds", "Seconds binds waited for drivers, summed.", stats.wait_seconds),
        ("classic_deallocations", "Deallocations of classic claims asked of their drivers.", stats.deallocations),
        ("classic_contexts_deleted", "PodSchedulingContexts deleted after their pod was bound.", stats.deleted),
    ):
        metric = CounterMetricFamily(f"{NAMESPACE}_{name}", text)
        metric.add_metric([], value)
        yield metric


def _preemption_metrics(service: SchedulingService) -> Iterator[Metric]:
    """Device-aware preemption (``state/preemption/devices.py``)."""
    stats = service.preemption.stats
    outcomes = CounterMetricFamily(
        f"{NAMESPACE}_preemptions",
        "Preemptions for pods (and gangs) no node fits, by outcome: started (victims evicted), refused "
        "(a PodDisruptionBudget protected the chosen victim), none (no set of victims frees the devices), "
        "budget (a gang's choice ran out of time: nobody evicted).",
        labels=["outcome"],
    )
    for name in ("started", "refused", "none", "budget"):
        outcomes.add_metric([name], stats.preemptions.get(name, 0))
    yield outcomes
    victims = CounterMetricFamily(f"{NAMESPACE}_preemption_victims", "Pods evicted to free devices.")
    victims.add_metric([], stats.victims)
    yield victims
    nominations = GaugeMetricFamily(
        f"{NAMESPACE}_nominations", "Preemptors whose freed devices are held for them (nominations standing)."
    )
    nominations.add_metric([], len(service.cluster.nominations.by_uid))
    yield nominations
    verb = CounterMetricFamily(
        f"{NAMESPACE}_preempt_verb_nodes",
        "Nodes of preempt requests by what the verb answered for them: passed_through, added (device "
        "holders added to kube-scheduler's victims), or omitted: fits_already, unresolvable, "
        "higher_priority_victim, no_victims_help, out_of_time.",
        labels=["outcome"],
    )
    counted = service.preempt_verb.stats.nodes
    for name in PREEMPT_VERB_OUTCOMES:
        verb.add_metric([name], counted.get(name, 0))
    yield verb
