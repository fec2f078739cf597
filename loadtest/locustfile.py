"""Locust scenarios against a running dra-extender: kube-scheduler's calls, replayed pod by pod.

The pods come from the cluster file the server serves (``--cluster-file``, written by
``python -m bench.cluster_gen``): the same pending pods, with the same UIDs, so the server knows their
claims. Two user classes:

- ``SchedulerUser`` does what kube-scheduler does for one pod (docs/pipeline.md,
  nodeCacheCapable): ``filter`` with every node's name, ``prioritize`` over the survivors (not
  when exactly one survives), ``bind`` to a best-scored node (ties broken at random, as the scheduler
  does). Each pod is taken once from a queue shared by all users of the process; template, direct and
  shared-claim pods come in the generator's mix.
- ``FilterUser`` is the pure read scenario: ``filter`` for one-GPU pods kept aside for it (never bound),
  over every node, as fast as it can.

Outcomes are reported as extra request rows of type ``POD`` (they are not HTTP requests and never
failures): ``scheduled`` (response time = the whole cycle, filter to bind), ``unschedulable`` (no node
fits, or the pod kept getting ``Error`` after retries), ``requeued`` (a filter ``Error`` such as a
shared claim being allocated for another pod right now, or a bind that lost a race: the scheduler would
retry the pod later; so does this file, at most ``MAX_ATTEMPTS`` times). A request row fails only for
what a scheduler would call an extender failure: a non-200 answer, a body that does not decode, or a
bind error after the retries.

Run (see loadtest/README.md)::

    locust -f loadtest/locustfile.py --headless -u 20 -r 5 -t 30s --host http://127.0.0.1:8888 \\
        --csv out --cluster-file /tmp/cluster.json
    locust -f loadtest/locustfile.py FilterUser ...      # the read scenario alone

The pod queue lives in one locust process: with ``--processes`` or distributed workers every process
would schedule the same pods, so run this file in one process.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from locust import FastHttpUser, constant, events, task
from locust.env import Environment
from locust.exception import StopUser

MIX_LABEL = "bench.dra-extender.io/mix"
SHAPE_LABEL = "bench.dra-extender.io/shape"
#: Scheduling attempts per pod before it counts as unschedulable.
MAX_ATTEMPTS = 4
HEADERS = {"Content-Type": "application/json"}


def _arguments(parser: Any) -> None:
    parser.add_argument(
        "--cluster-file",
        env_var="DRA_LOADTEST_CLUSTER",
        default="",
        help="the cluster file the server serves (JSON List or YAML), for its pods and node names",
    )
    parser.add_argument(
        "--probe-pods",
        type=int,
        env_var="DRA_LOADTEST_PROBE_PODS",
        default=16,
        help="one-GPU template pods kept aside for FilterUser (never bound); default 16",
    )
    parser.add_argument(
        "--stop-after",
        type=int,
        env_var="DRA_LOADTEST_STOP_AFTER",
        default=0,
        help="end the run (before --run-time) once this many pods are scheduled and, when FilterUser "
        "runs, this many read filters answered: a run as long as its work, not a time; default 0: off",
    )


events.init_command_line_parser.add_listener(_arguments)  # type: ignore[no-untyped-call]


class _StopAfter:
    """``--stop-after N``: counts scheduled pods and read filters, and quits the run once every
    scenario that runs has done N of its own (the smoke test's run ends on work done, so a slow
    machine makes it longer, never emptier)."""

    def __init__(self, environment: Environment, enough: int) -> None:
        self.environment = environment
        self.enough = enough
        # which scenario makes each count (the classes that run are known once the run starts)
        self.scenarios = {("POD", "scheduled"): "SchedulerUser", ("POST", "filter (read)"): "FilterUser"}
        self.counts = dict.fromkeys(self.scenarios, 0)
        self.quitting = False

    def request(self, request_type: str, name: str, exception: Any = None, **_: Any) -> None:
        key = (request_type, name)
        if key not in self.counts or exception is not None or self.quitting:
            return
        self.counts[key] += 1
        running = {cls.__name__ for cls in self.environment.user_classes}
        if all(self.counts[k] >= self.enough for k, scenario in self.scenarios.items() if scenario in running):
            self.quitting = True
            runner = self.environment.runner
            if runner is not None:
                import gevent

                gevent.spawn(runner.quit)  # not from this user's own greenlet: quit stops them all


def _on_init(environment: Environment, **_: Any) -> None:
    options = environment.parsed_options
    enough = int(getattr(options, "stop_after", 0) or 0) if options is not None else 0
    if enough > 0:
        environment.events.request.add_listener(_StopAfter(environment, enough).request)


events.init.add_listener(_on_init)  # type: ignore[no-untyped-call]


def _load_objects(path: Path) -> list[dict[str, Any]]:
    if path.is_dir():
        objects: list[dict[str, Any]] = []
        for child in sorted(path.iterdir()):
            if child.suffix in (".json", ".yaml", ".yml"):
                objects += _load_objects(child)
        return objects
    if path.suffix == ".json":
        try:
            import orjson

            document = orjson.loads(path.read_bytes())
        except ImportError:
            document = json.loads(path.read_text(encoding="utf-8"))
        documents = [document]
    else:
        import yaml

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        documents = list(yaml.load_all(path.read_text(encoding="utf-8"), Loader=loader))
    out: list[dict[str, Any]] = []
    for doc in documents:
        if isinstance(doc, dict) and doc.get("kind", "").endswith("List") and "items" in doc:
            out += doc["items"] or []
        elif isinstance(doc, dict):
            out.append(doc)
    return out


class Workload:
    """The pods and node names of the served cluster, shared by every user of this process."""

    _instance: Workload | None = None
    _lock = threading.Lock()

    def __init__(self, path: Path, probe_count: int) -> None:
        objects = _load_objects(path)
        self.node_names = sorted({o["metadata"]["name"] for o in objects if o.get("kind") == "Node"})
        pods = [o for o in objects if o.get("kind") == "Pod" and not (o.get("spec") or {}).get("nodeName")]
        probes = [
            p
            for p in pods
            if (p["metadata"].get("labels") or {}).get(SHAPE_LABEL) == "one-gpu"
            and (p["metadata"].get("labels") or {}).get(MIX_LABEL) == "template"
        ][:probe_count]
        probe_ids = {id(p) for p in probes}
        self.probes = probes or pods[:1]
        self.queue: deque[dict[str, Any]] = deque(p for p in pods if id(p) not in probe_ids)
        self.attempts: dict[str, int] = {}
        if not self.node_names:
            raise RuntimeError(f"{path}: no Node objects; the load test needs the served cluster file")

    @classmethod
    def get(cls, environment: Environment) -> Workload:
        with cls._lock:
            if cls._instance is None:
                options = environment.parsed_options
                path = getattr(options, "cluster_file", "") if options is not None else ""
                if not path:
                    raise RuntimeError("give --cluster-file (or DRA_LOADTEST_CLUSTER): the served cluster file")
                cls._instance = Workload(Path(path), int(getattr(options, "probe_pods", 16)))
            return cls._instance

    def next_pod(self) -> dict[str, Any] | None:
        try:
            return self.queue.popleft()
        except IndexError:
            return None

    def retry(self, pod: dict[str, Any]) -> bool:
        """Queue the pod again; False once it has used up its attempts."""
        uid = pod["metadata"]["uid"]
        self.attempts[uid] = self.attempts.get(uid, 1) + 1
        if self.attempts[uid] > MAX_ATTEMPTS:
            return False
        self.queue.append(pod)
        return True


def _body(**fields: Any) -> str:
    return json.dumps(fields, separators=(",", ":"))


class _ExtenderUser(FastHttpUser):
    abstract = True
    wait_time = constant(0)

    def on_start(self) -> None:
        self.workload = Workload.get(self.environment)

    def outcome(self, name: str, started: float) -> None:
        """An extra ``POD`` row: never a failure, its time is the whole scheduling attempt."""
        self.environment.events.request.fire(
            request_type="POD",
            name=name,
            response_time=(time.perf_counter() - started) * 1000,
            response_length=0,
            exception=None,
            context={},
        )

    def call(self, verb: str, body: str, name: str | None = None) -> Any:
        """POST a verb; the decoded answer, or None after marking the request failed."""
        with self.client.post(f"/{verb}", data=body, headers=HEADERS, name=name or verb, catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"HTTP {r.status_code}: {(r.text or '')[:200]}")
                return None
            try:
                answer = json.loads(r.content or b"")
            except ValueError:
                r.failure("the answer is not JSON")
                return None
            r.success()
            return answer


class SchedulerUser(_ExtenderUser):
    """kube-scheduler's filter -> prioritize -> bind for one pod after another."""

    weight = 3

    @task
    def schedule_one(self) -> None:
        pod = self.workload.next_pod()
        if pod is None:
            raise StopUser()  # every pod was handled
        started = time.perf_counter()
        nodes = self.workload.node_names
        answer = self.call("filter", _body(Pod=pod, Nodes=None, NodeNames=nodes))
        if answer is None:
            return
        if answer.get("Error"):
            # A transient condition (claim being allocated for another pod, not created yet, ...)
            # or a pod no retry can fix: the scheduler retries with backoff either way.
            self._again(pod, started)
            return
        survivors = answer.get("NodeNames") or []
        if not survivors:
            self.outcome("unschedulable", started)
            return
        best = survivors[0]
        if len(survivors) > 1:
            scores = self.call("prioritize", _body(Pod=pod, Nodes=None, NodeNames=survivors))
            if scores:
                top = max(entry["Score"] for entry in scores)
                best = random.choice([entry["Host"] for entry in scores if entry["Score"] == top])
        meta = pod["metadata"]
        binding = _body(
            PodName=meta["name"], PodNamespace=meta.get("namespace") or "default", PodUID=meta["uid"], Node=best
        )
        with self.client.post("/bind", data=binding, headers=HEADERS, name="bind", catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"HTTP {r.status_code}: {(r.text or '')[:200]}")
                return
            try:
                error = json.loads(r.content or b"").get("Error")
            except ValueError:
                r.failure("the answer is not JSON")
                return
            if not error:
                r.success()
                self.outcome("scheduled", started)
                return
            # Another user's bind took the devices or the shared claim first: a lost race, retried.
            if self.workload.retry(pod):
                r.success()
                self.outcome("requeued", started)
            else:
                r.failure(f"bind kept failing: {error}")

    def _again(self, pod: dict[str, Any], started: float) -> None:
        self.outcome("requeued" if self.workload.retry(pod) else "unschedulable", started)


class FilterUser(_ExtenderUser):
    """The read scenario: filter one-GPU pods over every node."""

    weight = 1

    @task
    def filter_one(self) -> None:
        pod = random.choice(self.workload.probes)
        answer = self.call("filter", _body(Pod=pod, Nodes=None, NodeNames=self.workload.node_names), "filter (read)")
        if answer is not None and not answer.get("NodeNames") and not answer.get("Error"):
            self.outcome("unschedulable (read)", time.perf_counter())
