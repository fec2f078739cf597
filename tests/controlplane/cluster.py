"""A real Kubernetes control plane on loopback, for the end-to-end tier and the benchmarks.

``ControlPlane(assets, folder).start()`` makes a throwaway PKI (``pki.py``), then starts etcd,
kube-apiserver and kube-controller-manager on free loopback ports, each waited for on its health
endpoint; ``start_scheduler(config)`` adds a kube-scheduler with a KubeSchedulerConfiguration;
``stop()`` ends every process it started, by PID (SIGTERM, then SIGKILL after a grace), also when a
test failed, and ``atexit`` does the same should the caller never get there. Every process runs in
a session of its own, its output in ``folder/logs/<name>.log``.

Nodes are plain Node objects (no kubelet): ``add_node`` creates one and makes it Ready without the
``not-ready`` taint the API server's admission gives it (``../shared/k8s/README.md``'s traps).
Flags follow that README, which confirmed them on v1.36.3.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .api import Api, ApiError
from .assets import Assets
from .pki import KeyPair, Pki, make_pki

__all__ = ["ControlPlane", "ControlPlaneError", "Options", "free_port"]

#: The DRA gates of 1.36 (all on by default there; DRAAdminAccess and DRAPrioritizedList are GA),
#: plus DRADeviceTaintRules (beta, off by default): the API server serves DeviceTaintRules in
#: v1beta2 and kube-controller-manager's taint eviction reads them. Only the taint rule tests create
#: rules; a kube-scheduler that should apply them gets the gate itself (``TAINT_RULES_GATE``).
TAINT_RULES_GATE = "DRADeviceTaintRules=true"
FEATURE_GATES = (
    "DRAConsumableCapacity=true,DRAPartitionableDevices=true,DRADeviceTaints=true,DRAPrioritizedList=true,"
    f"DRAAdminAccess=true,DRAResourceClaimDeviceStatus=true,{TAINT_RULES_GATE}"
)
RUNTIME_CONFIG = "resource.k8s.io/v1=true,resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"
#: How long a component may take to become healthy: a bound against a hang, never a measure.
START_TIMEOUT = 180.0
STOP_GRACE = 10.0


class ControlPlaneError(Exception):
    """A component did not start (its log's last lines are in the message)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Options:
    """What a test or a benchmark may change about the control plane."""

    feature_gates: str = FEATURE_GATES
    runtime_config: str = RUNTIME_CONFIG
    apiserver_args: tuple[str, ...] = ()
    controller_manager_args: tuple[str, ...] = ()
    #: kube-controller-manager's controllers (node-lifecycle off: fake nodes never heartbeat).
    controllers: str = "*,-node-lifecycle-controller"
    controller_manager: bool = True


@dataclass
class Process:
    """One component: its command, PID and log."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM to its session, SIGKILL after ``grace``; waits for it (no zombie left)."""
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(30)


@dataclass
class ControlPlane:
    assets: Assets
    folder: Path
    options: Options = field(default_factory=Options)

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.logs = self.folder / "logs"
        self.logs.mkdir(exist_ok=True)
        self.processes: dict[str, Process] = {}
        self.pki: Pki | None = None
        self.apiserver_port = 0
        #: Each scheduler's secure port (healthz, readyz, metrics), by its process name.
        self.scheduler_ports: dict[str, int] = {}
        atexit.register(self.stop)

    # --- start and stop ---------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        """PKI, etcd, kube-apiserver (ready), kube-controller-manager (healthy)."""
        try:
            self.pki = make_pki(self.folder / "pki")
            self._start_etcd()
            self._start_apiserver()  # and self.admin, its cluster-admin client
            if self.options.controller_manager:
                self._start_controller_manager()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Every component, the schedulers first, etcd last."""
        order = ("kube-controller-manager", "kube-apiserver", "etcd")
        for name in [n for n in self.processes if n not in order] + list(order):
            process = self.processes.pop(name, None)
            if process is not None:
                process.stop()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    def _launch(self, name: str, args: Sequence[str], *, binary: str = "") -> Process:
        log = self.logs / f"{name}.log"
        with log.open("ab") as out:
            out.write(f"\n===== {name}: {' '.join(args)}\n".encode())
            out.flush()
            popen = subprocess.Popen(
                [str(self.assets.binary(binary or name)), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own session: stopped as a group, never by name
            )
        process = Process(name, popen, log)
        self.processes[name] = process
        return process

    def _wait_healthy(self, process: Process, check: Any, *, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if not process.alive():
                raise ControlPlaneError(f"{process.name} exited ({process.popen.returncode}):\n{process.tail()}")
            with contextlib.suppress(OSError, urllib.error.URLError, ssl.SSLError, ApiError, ValueError):
                if check():
                    return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{process.name}: {what} not within {START_TIMEOUT:.0f} s:\n{process.tail()}")
            time.sleep(0.1)

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        data = self.folder / "etcd"
        data.mkdir(mode=0o700, exist_ok=True)
        process = self._launch(
            "etcd",
            [
                "--name=test", f"--data-dir={data}",
                f"--listen-client-urls=http://127.0.0.1:{client}", f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}", "--quota-backend-bytes=8589934592",
                "--log-level=warn", "--unsafe-no-fsync",
            ],
        )  # fmt: skip
        self.etcd_url = f"http://127.0.0.1:{client}"

        def healthy() -> bool:
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as answer:
                return bool(json.loads(answer.read()).get("health") == "true")

        self._wait_healthy(process, healthy, what="/health")

    def _start_apiserver(self) -> None:
        assert self.pki is not None
        pki, options = self.pki, self.options
        self.apiserver_port = free_port()
        process = self._launch(
            "kube-apiserver",
            [
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.apiserver_port}",
                f"--tls-cert-file={pki.apiserver.cert}", f"--tls-private-key-file={pki.apiserver.key}",
                f"--client-ca-file={pki.ca.pair.cert}",
                f"--requestheader-client-ca-file={pki.front_proxy_ca.pair.cert}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
                f"--proxy-client-key-file={pki.front_proxy_client.key}",
                f"--service-account-key-file={pki.service_account_pub}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--authorization-mode=Node,RBAC",
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                f"--runtime-config={options.runtime_config}",
                f"--feature-gates={options.feature_gates}",
                "--max-requests-inflight=3000", "--max-mutating-requests-inflight=1000",
                *options.apiserver_args,
            ],
        )  # fmt: skip
        self.admin = self.api_as("admin", "admin", "system:masters")
        self._wait_healthy(process, lambda: self.admin.text("/readyz") == "ok", what="/readyz")

    def _start_controller_manager(self) -> None:
        assert self.pki is not None
        pki = self.pki
        kubeconfig = self.kubeconfig("controller-manager", "system:kube-controller-manager", "system:masters")
        port = free_port()
        process = self._launch(
            "kube-controller-manager",
            [
                f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1", f"--secure-port={port}",
                "--kube-api-qps=1000", "--kube-api-burst=2000",
                f"--controllers={self.options.controllers}",
                f"--service-account-private-key-file={pki.service_account_key}",
                f"--root-ca-file={pki.ca.pair.cert}",
                f"--cluster-signing-cert-file={pki.ca.pair.cert}", f"--cluster-signing-key-file={pki.ca.pair.key}",
                "--leader-elect=false", "--use-service-account-credentials=true",
                f"--feature-gates={self.options.feature_gates}",
                *self.options.controller_manager_args,
            ],
        )  # fmt: skip
        self._wait_healthy(
            process, lambda: _insecure_text(f"https://127.0.0.1:{port}/healthz") == "ok", what="/healthz"
        )

    def start_scheduler(
        self, configuration: Mapping[str, Any], *, name: str = "kube-scheduler", extra_args: Sequence[str] = ()
    ) -> Process:
        """A kube-scheduler process called ``name`` (several may run: leader election) with
        ``configuration`` (a KubeSchedulerConfiguration whose ``clientConnection.kubeconfig`` and
        ``leaderElection`` are filled in unless given); replaces one of that name. Waits for
        /healthz and, unless it is to wait for a Lease, /readyz (its informers synced)."""
        self.stop_scheduler(name)
        kubeconfig = self.kubeconfig("scheduler", "system:kube-scheduler", "system:masters")
        config = json.loads(json.dumps(dict(configuration)))
        config.setdefault("apiVersion", "kubescheduler.config.k8s.io/v1")
        config.setdefault("kind", "KubeSchedulerConfiguration")
        connection = config.setdefault("clientConnection", {})
        connection.setdefault("kubeconfig", str(kubeconfig))
        connection.setdefault("qps", 1000)
        connection.setdefault("burst", 2000)
        config.setdefault("leaderElection", {"leaderElect": False})
        path = self.folder / f"{name}-config.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        port = free_port()
        self.scheduler_ports[name] = port
        process = self._launch(
            name,
            [
                f"--config={path}", f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1", f"--secure-port={port}", *extra_args,
            ],
            binary="kube-scheduler",
        )  # fmt: skip
        base = f"https://127.0.0.1:{port}"
        self._wait_healthy(process, lambda: _insecure_text(f"{base}/healthz") == "ok", what="/healthz")
        if not config["leaderElection"].get("leaderElect"):
            self._wait_healthy(process, lambda: _insecure_text(f"{base}/readyz") == "ok", what="/readyz")
        return process

    def stop_scheduler(self, name: str = "kube-scheduler") -> None:
        process = self.processes.pop(name, None)
        if process is not None:
            process.stop()

    def pids(self) -> dict[str, int]:
        return {name: p.popen.pid for name, p in self.processes.items() if p.alive()}

    # --- users and kubeconfigs ----------------------------------------------------------------------

    def client_pair(self, name: str, user: str, *groups: str) -> KeyPair:
        assert self.pki is not None
        return self.pki.client(name, user, *groups)

    def api_as(self, name: str, user: str, *groups: str) -> Api:
        """A client authenticated by a certificate for ``user`` in ``groups``."""
        assert self.pki is not None
        pair = self.client_pair(name, user, *groups)
        return Api(self.server, self.pki.ca.pair.cert, pair.cert, pair.key)

    def kubeconfig(self, name: str, user: str, *groups: str) -> Path:
        """A kubeconfig for ``user`` (in ``groups``) with a client certificate."""
        pair = self.client_pair(name, user, *groups)
        return self._write_kubeconfig(name, user, {"client-certificate": str(pair.cert), "client-key": str(pair.key)})

    def token_kubeconfig(self, name: str, token: str) -> Path:
        """A kubeconfig that authenticates with a bearer ``token`` only (a ServiceAccount's)."""
        return self._write_kubeconfig(name, name, {"token": token})

    def service_account_token(self, namespace: str, name: str, *, seconds: int = 3600) -> str:
        """A token for the ServiceAccount (TokenRequest), as the kubelet would project it."""
        answer = self.admin.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}},
        )
        return str(answer["status"]["token"])

    def _write_kubeconfig(self, name: str, user: str, credentials: Mapping[str, str]) -> Path:
        assert self.pki is not None
        ca = base64.b64encode(self.pki.ca.pair.cert.read_bytes()).decode()
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": self.server, "certificate-authority-data": ca}}],
            "users": [{"name": user, "user": dict(credentials)}],
            "contexts": [{"name": f"{user}@test", "context": {"cluster": "test", "user": user}}],
            "current-context": f"{user}@test",
        }
        path = self.folder / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump(document), encoding="utf-8")
        path.chmod(0o600)
        return path

    # --- cluster objects ------------------------------------------------------------------------------

    def add_nodes(self, names: Iterable[str], *, labels: Mapping[str, str] | None = None) -> None:
        """Ready Nodes without the not-ready taint (no kubelet will ever report for them)."""
        for name in names:
            node_labels = {"kubernetes.io/hostname": name, **(labels or {})}
            self.admin.create(
                "/api/v1/nodes",
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": node_labels},
                    "status": {"capacity": {"cpu": "64", "memory": "256Gi", "pods": "250"}},
                },
            )
            self.make_ready(name)

    def make_ready(self, name: str) -> None:
        status = {
            "capacity": {"cpu": "64", "memory": "256Gi", "pods": "250"},
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "250"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "a test node",
                    "lastHeartbeatTime": _now(),
                    "lastTransitionTime": _now(),
                }
            ],
        }
        self.admin.merge_patch(f"/api/v1/nodes/{name}/status", {"status": status})
        node = self.admin.get(f"/api/v1/nodes/{name}")
        taints = [t for t in (node["spec"].get("taints") or []) if not t["key"].startswith("node.kubernetes.io/")]
        self.admin.merge_patch(f"/api/v1/nodes/{name}", {"spec": {"taints": taints or None}})


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _insecure_text(url: str) -> str:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the components' own self-signed serving certificates
    with urllib.request.urlopen(url, context=context, timeout=5) as answer:
        return str(answer.read().decode().strip())
