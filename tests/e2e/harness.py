"""The end-to-end tier's pieces: the real extender behind the real kube-scheduler on a real control
plane (``tests/controlplane``), set up as ``deploy/`` sets them up.

- ``Deployment``: ``deploy/base`` applied to the control plane (namespace, ServiceAccount, RBAC), a
  token of the ServiceAccount ``dra-extender-scheduler`` in a token-only kubeconfig, and the pair the
  Deployment runs: ``dra-extender serve --kubeconfig <that> --lease-name dra-extender-scheduler
  --lease-namespace dra-extender`` and a kube-scheduler with the ConfigMap's
  KubeSchedulerConfiguration, its extender URL pointed at that extender, authenticated as the same
  ServiceAccount. Several pairs may run (leader fail-over).
- ``Scenario``: one test's namespace and driver (``gpu-<n>.e2e.example.com``) with builders for
  DeviceClasses, ResourceSlices, claims, templates and pods (``schedulerName:
  dra-extender-scheduler``), waits for the outcome, and a clean-up of everything it made. Another
  test's pods never match this test's devices: each class selects its own driver.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.controlplane.api import Api, ApiError, eventually
from tests.controlplane.cluster import ControlPlane, Process, free_port
from tests.deploy.render import DEPLOY, render, scheduler_config

__all__ = ["Deployment", "Extender", "Scenario"]

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "dra-extender"
SERVICE_ACCOUNT = "dra-extender-scheduler"
LEASE = "dra-extender-scheduler"
SCHEDULER_NAME = "dra-extender-scheduler"
#: The reference: a second kube-scheduler with the in-tree DynamicResources plugin (``in_tree``).
IN_TREE = "in-tree-scheduler"
IN_TREE_PROCESS = "kube-scheduler-in-tree"
GROUP = "resource.k8s.io"
V1 = f"{GROUP}/v1"

_counter = itertools.count(1)
_replica_numbers = itertools.count(1)


@dataclass
class Extender:
    """``dra-extender serve --kubeconfig`` in a subprocess (JSON logs in ``log``)."""

    kubeconfig: Path
    log: Path
    args: Sequence[str] = ()
    port: int = field(default_factory=free_port)
    popen: subprocess.Popen[bytes] | None = None
    #: The checkout whose code runs (the benchmarks' "before" side, ``BENCH_EXTENDER_ROOT``).
    root: Path = ROOT
    #: Served over HTTPS (``args`` carry the ``--tls-*`` flags): the client side of its TLS, with
    #: the client certificate where the extender asks for one.
    tls: ssl.SSLContext | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls is not None else 'http'}://127.0.0.1:{self.port}"

    def start(self, *, timeout: float = 120.0) -> Extender:
        """Started and ready (every watch synced); a bound of ``timeout`` against a hang."""
        env = {**os.environ, "PYTHONPATH": str(self.root), "DRA_EXTENDER_LOG_FORMAT": "json"}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "extender", "serve", "--kubeconfig", str(self.kubeconfig),
                 "--listen", f"127.0.0.1:{self.port}", *self.args],
                cwd=self.root, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while self.status("/readyz") != 200:
            if self.popen.poll() is not None:
                raise RuntimeError(f"dra-extender serve exited ({self.popen.returncode}):\n{self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"dra-extender serve not ready within {timeout:.0f} s:\n{self.tail()}")
            time.sleep(0.1)
        return self

    def status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10, context=self.tls) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=30, context=self.tls) as answer:
            return json.loads(answer.read())

    def tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
        return ""

    def events(self) -> list[dict[str, Any]]:
        """The JSON log lines so far."""
        out = []
        with contextlib.suppress(OSError):
            for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("{"):
                    with contextlib.suppress(ValueError):
                        out.append(json.loads(line))
        return out

    def stop(self, *, kill: bool = False) -> None:
        popen = self.popen
        if popen is None or popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            popen.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait(20)


@dataclass
class Pair:
    """One replica of the Deployment: its extender and its kube-scheduler."""

    name: str
    extender: Extender
    scheduler: Process


class Deployment:
    """``deploy/base`` on ``plane``; see the module docstring."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.admin = plane.admin
        self.pairs: list[Pair] = []
        documents = render(DEPLOY / "base")
        self.scheduler_configuration = scheduler_config(documents)
        for doc in documents:
            if doc["kind"] in (
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
            ):
                self._apply(doc)
        token = eventually(lambda: self._token(), what="a token of the ServiceAccount")
        #: The ServiceAccount's token-only kubeconfig: what the pod's in-cluster config amounts to.
        self.kubeconfig = plane.token_kubeconfig("dra-extender-serviceaccount", token)
        self.api = Api(plane.server, plane.pki.ca.pair.cert if plane.pki else Path(), token=token)

    def _token(self) -> str | None:
        try:
            return self.plane.service_account_token(NAMESPACE, SERVICE_ACCOUNT, seconds=24 * 3600)
        except ApiError as exc:
            if exc.status == 404:
                return None  # the ServiceAccount is not created yet
            raise

    def _apply(self, doc: Mapping[str, Any]) -> None:
        path = _collection_path(doc)
        try:
            self.admin.create(path, doc)
        except ApiError as exc:
            if exc.status != 409:
                raise

    def start_pair(
        self,
        *,
        extender_args: Sequence[str] = (),
        leader_election: bool = True,
        scheduler_args: Sequence[str] = (),
    ) -> Pair:
        """One more replica: the extender (ready), then its kube-scheduler (healthy), started with
        ``scheduler_args`` (feature gates, say)."""
        index = next(_replica_numbers)  # never a running pair's name, even after one was stopped
        name = f"replica-{index}"
        extender = Extender(
            self.kubeconfig,
            self.plane.logs / f"dra-extender-{name}.log",
            args=["--lease-name", LEASE, "--lease-namespace", NAMESPACE, *extender_args],
        ).start()
        config = json.loads(json.dumps(self.scheduler_configuration))
        (only,) = config["extenders"]
        only["urlPrefix"] = extender.url + "/"
        config["clientConnection"] = {"kubeconfig": str(self.kubeconfig), "qps": 1000, "burst": 2000}
        election = config.setdefault("leaderElection", {})
        election["leaderElect"] = leader_election
        if leader_election:
            # kube-scheduler's own defaults: a crashed leader's Lease is taken over within 15 s. Shorter
            # ones would tie the tier to the machine's speed: a leader starved of CPU past its renew
            # deadline loses the Lease, and kube-scheduler exits when it does.
            election.update(leaseDuration="15s", renewDeadline="10s", retryPeriod="2s")
        try:
            scheduler = self.plane.start_scheduler(config, name=f"kube-scheduler-{name}", extra_args=scheduler_args)
        except BaseException:
            extender.stop()
            raise
        pair = Pair(name, extender, scheduler)
        self.pairs.append(pair)
        return pair

    def stop_pair(self, pair: Pair, *, kill: bool = False) -> None:
        """The replica's scheduler, then its extender (SIGKILL both with ``kill``: a crash)."""
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pair.scheduler.popen.pid, signal.SIGKILL)
            pair.scheduler.popen.wait(20)
        self.plane.stop_scheduler(pair.scheduler.name)
        pair.extender.stop(kill=kill)
        if pair in self.pairs:
            self.pairs.remove(pair)

    def stop(self) -> None:
        for pair in list(self.pairs):
            self.stop_pair(pair)

    def stand_in(self, pair: Pair, by: Pair) -> Pair:
        """The stopped ``pair`` now stands for the running ``by`` (the same object with ``by``'s
        processes), so that a session fixture holding ``pair`` stays valid after a fail-over."""
        self.pairs.remove(by)
        pair.name, pair.extender, pair.scheduler = by.name, by.extender, by.scheduler
        self.pairs.insert(0, pair)
        return pair

    def leading_pair(self) -> Pair | None:
        """The running pair whose kube-scheduler acquired the Lease (its log says so; every pair runs
        on this host, so the Lease's ``<hostname>_<uuid>`` does not tell them apart). A scheduler
        that loses the Lease exits, so at most one running pair has acquired it."""
        leading = [
            p
            for p in self.pairs
            if p.scheduler.alive()
            and '"Successfully acquired lease"' in p.scheduler.log.read_text(errors="replace").rpartition("\n===== ")[2]
        ]
        return leading[0] if len(leading) == 1 else None

    def leader(self) -> str | None:
        """The holder identity of the scheduler's Lease (kube-scheduler writes ``<host>_<uuid>``)."""
        lease = self.admin.get_or_none(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}")
        return None if lease is None else (lease.get("spec") or {}).get("holderIdentity")


def _collection_path(doc: Mapping[str, Any]) -> str:
    api_version, kind = doc["apiVersion"], doc["kind"]
    plural = {
        "Namespace": "namespaces", "ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings", "Role": "roles", "RoleBinding": "rolebindings",
        "Pod": "pods", "Node": "nodes", "PodDisruptionBudget": "poddisruptionbudgets",
        "DeviceClass": "deviceclasses", "ResourceSlice": "resourceslices", "ResourceClaim": "resourceclaims",
        "ResourceClaimTemplate": "resourceclaimtemplates", "ConfigMap": "configmaps",
        "PriorityClass": "priorityclasses", "DeviceTaintRule": "devicetaintrules", "PodGroup": "podgroups",
        "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    }[kind]  # fmt: skip
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    namespace = (doc.get("metadata") or {}).get("namespace")
    if namespace and kind not in ("Namespace", "ClusterRole", "ClusterRoleBinding", "Node", "PriorityClass"):
        return f"{prefix}/namespaces/{namespace}/{plural}"
    return f"{prefix}/{plural}"


#: Kinds ``cleanup`` deletes itself (cluster-scoped, or the namespace): the rest go with the namespace.
CLUSTER_KINDS = (
    "Node",
    "DeviceClass",
    "ResourceSlice",
    "Namespace",
    "PriorityClass",
    "DeviceTaintRule",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


def object_path(doc: Mapping[str, Any]) -> str:
    return f"{_collection_path(doc)}/{doc['metadata']['name']}"


class Scenario:
    """One test's namespace, driver and objects; ``cleanup()`` deletes what it made."""

    def __init__(self, deployment: Deployment, label: str = "") -> None:
        self.deployment = deployment
        self.admin = deployment.admin
        number = next(_counter)
        self.namespace = f"e2e-{number}"
        self.driver = f"gpu-{number}.e2e.example.com"
        self.prefix = f"e2e{number}"
        self.label = label
        self._made: list[dict[str, Any]] = []
        self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}})

    # --- objects ----------------------------------------------------------------------------------

    def create(self, doc: dict[str, Any]) -> dict[str, Any]:
        made: dict[str, Any] = self.admin.create(_collection_path(doc), doc)
        self._made.append(doc)
        return made

    def create_as_kubectl(self, doc: dict[str, Any]) -> dict[str, Any]:
        """``create`` with the body as kubectl (Go's encoding/json) sends it: compact, with ``<``,
        ``>`` and ``&`` escaped. The API server keeps a claim's opaque ``parameters`` as the bytes it
        was sent and compares those bytes when it checks that the spec did not change, so how they
        were sent decides whether a JSON client (the extender) can update the claim
        (test_claims.py)."""
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
        for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
            text = text.replace(char, escaped)
        made: dict[str, Any] = self.admin.request("POST", _collection_path(doc), text.encode())
        self._made.append(doc)
        return made

    def nodes(self, count: int, *, labels: Mapping[str, str] | None = None, first: int = 1) -> list[str]:
        """``count`` Ready nodes ``<prefix>-node-<first>``..., with ``labels``."""
        names = [f"{self.prefix}-node-{i}" for i in range(first, first + count)]
        self.deployment.plane.add_nodes(names, labels=labels)
        self._made += [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}} for n in names]
        return names

    def device_class(self, name: str = "gpu", cel: str = "") -> str:
        full = f"{self.prefix}-{name}"
        expression = f'device.driver == "{self.driver}"' + (f" && ({cel})" if cel else "")
        self.create(
            {
                "apiVersion": V1,
                "kind": "DeviceClass",
                "metadata": {"name": full},
                "spec": {"selectors": [{"cel": {"expression": expression}}]},
            }
        )
        return full

    def gpus(self, node: str, count: int, *, memory: str = "80Gi", model: str = "a100", **extra: Any) -> None:
        """A ResourceSlice of ``count`` GPUs (``gpu-0``...) on ``node``, in the pool named after it."""
        devices = [
            {
                "name": f"gpu-{i}",
                "attributes": {"model": {"string": model}, "index": {"int": i}},
                "capacity": {"memory": {"value": memory}},
            }
            for i in range(count)
        ]
        self.slice(node, devices, **extra)

    def slice(self, node: str, devices: list[dict[str, Any]], **spec: Any) -> None:
        body = {
            "driver": self.driver,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": devices,
            **spec,
        }
        self.create(
            {"apiVersion": V1, "kind": "ResourceSlice", "metadata": {"name": f"{node}-{self.prefix}"}, "spec": body}
        )

    def claim(self, name: str, device_class: str, count: int = 1, **request: Any) -> None:
        exact = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count, **request}
        self.create(
            {
                "apiVersion": V1,
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"devices": {"requests": [{"name": "gpus", "exactly": exact}]}},
            }
        )

    def template(self, name: str, device_class: str, count: int = 1) -> None:
        exact = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
        self.create(
            {
                "apiVersion": V1,
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": exact}]}}},
            }
        )

    def pod(
        self,
        name: str,
        *claims: str,
        templates: Sequence[str] = (),
        priority: str | None = None,
        labels: Mapping[str, str] | None = None,
        scheduler_name: str = SCHEDULER_NAME,
    ) -> None:
        refs = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
        refs += [{"name": f"t{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)]
        spec: dict[str, Any] = {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": r["name"]} for r in refs]},
                }
            ],
            "resourceClaims": refs,
        }
        if priority:
            spec["priorityClassName"] = priority
        self.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": self.namespace, "labels": dict(labels or {})},
                "spec": spec,
            }
        )

    # --- reading -------------------------------------------------------------------------------------

    def get_pod(self, name: str) -> dict[str, Any]:
        pod: dict[str, Any] = self.admin.get(f"/api/v1/namespaces/{self.namespace}/pods/{name}")
        return pod

    def get_claim(self, name: str) -> dict[str, Any]:
        claim: dict[str, Any] = self.admin.get(f"/apis/{V1}/namespaces/{self.namespace}/resourceclaims/{name}")
        return claim

    def claims(self) -> list[dict[str, Any]]:
        return self.admin.items(f"/apis/{V1}/namespaces/{self.namespace}/resourceclaims")

    def bound(self, name: str, *, timeout: float = 120.0) -> str:
        """The node the pod got (waits; a bound against a hang only)."""
        node: str = eventually(
            lambda: self.get_pod(name)["spec"].get("nodeName"), timeout=timeout, what=f"pod {name} bound"
        )
        return node

    def events_for(self, name: str, reason: str) -> list[dict[str, Any]]:
        events = self.admin.items(
            f"/api/v1/namespaces/{self.namespace}/events",
            fieldSelector=f"involvedObject.name={name},reason={reason}",
        )
        return events

    def event(self, name: str, reason: str, *, timeout: float = 120.0) -> dict[str, Any]:
        found: list[dict[str, Any]] = eventually(
            lambda: self.events_for(name, reason), timeout=timeout, what=f"a {reason} event for {name}"
        )
        return found[-1]

    # --- clean-up ----------------------------------------------------------------------------------------

    def cleanup(self) -> None:
        """Pods first (grace 0: no kubelet ends them), then the namespace and cluster objects."""
        for pod in self.admin.items(f"/api/v1/namespaces/{self.namespace}/pods"):
            self.admin.delete(f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}", grace_seconds=0)
        for doc in reversed(self._made):
            if doc["kind"] in CLUSTER_KINDS:
                with contextlib.suppress(ApiError):
                    self.admin.delete(object_path(doc))


@contextlib.contextmanager
def scenario(deployment: Deployment) -> Iterator[Scenario]:
    made = Scenario(deployment)
    try:
        yield made
    finally:
        made.cleanup()
