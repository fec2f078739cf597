"""Crash consistency (issue 13, part 4): the real server (``python -m extender serve
--kubeconfig``) against the strict fake API server, killed with SIGKILL at each step of a bind,
then started again. With kube-controller-manager's claim cleanup modelled
(``tests/fakes/claim_controller.py``) and kube-scheduler retrying the pod as it would, the cluster
converges with no operator action: the pod's claim is used where it was allocated (pinned, never
allocated twice), a claim of a pod that went away is freed, finalizer included, and no reservation
names a pod that does not exist. docs/reliability.md draws the states."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bench.pipeline import kubeconfig_text
from tests import manifests as m
from tests.backends.kube.test_backend import assert_consistent, claim_in_fake, node_of, until
from tests.fakes import FakeApiServer
from tests.fakes.claim_controller import DELETE_PROTECTION, ReservationController

REPO = Path(__file__).resolve().parents[3]

#: Where the first process dies: what the API server has carried out of its bind by then.
STEPS = {
    "finalizer written": ("PUT", r"/resourceclaims/c1/status$"),  # the status write hangs
    "allocation written": ("POST", r"/pods/p1/binding$"),  # the binding hangs: never made
    "binding made": ("GET", r"/pods/p1$"),  # the binding's answer lost, the follow-up read hangs
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Extender:
    """One ``dra-extender serve`` process on the fake."""

    def __init__(self, kubeconfig: Path) -> None:
        self.port = _free_port()
        command = [sys.executable, "-m", "extender", "serve", "--kubeconfig", str(kubeconfig)]
        command += ["--listen", f"127.0.0.1:{self.port}", "--log-format", "json", "--log-level", "warning"]
        command += ["--hold-seconds", "0", "--requeue-rate", "0"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("DRA_EXTENDER_")}
        self.process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.url = f"http://127.0.0.1:{self.port}"

    async def ready(self, session: aiohttp.ClientSession, timeout: float = 60) -> None:
        async with asyncio.timeout(timeout):
            while True:
                if self.process.poll() is not None:
                    stderr = self.process.stderr.read().decode() if self.process.stderr else ""
                    raise AssertionError(f"extender exited with {self.process.returncode}: {stderr[-2000:]}")
                try:
                    async with session.get(f"{self.url}/readyz") as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.process.stderr is not None:
            self.process.stderr.close()

    async def post(self, session: aiohttp.ClientSession, verb: str, body: dict[str, Any]) -> Any:
        async with session.post(f"{self.url}/{verb}", json=body) as response:
            assert response.status == 200, await response.text()
            return await response.json()

    async def schedule(self, session: aiohttp.ClientSession, pod: str, claim: str, nodes: list[str]) -> str | None:
        """kube-scheduler's attempt: filter, then bind to the first node that passed."""
        answer = await self.post(session, "filter", {"Pod": m.pod(pod, claim), "NodeNames": nodes})
        if answer["Error"] or not answer["NodeNames"]:
            return None
        node: str = answer["NodeNames"][0]
        bind = {"PodName": pod, "PodNamespace": "default", "PodUID": f"uid-{pod}", "Node": node}
        result = await self.post(session, "bind", bind)
        return node if not result["Error"] else None


@pytest.fixture
async def harness(fake: FakeApiServer, tmp_path: Path) -> AsyncIterator[Callable[[], Extender]]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kubeconfig_text(fake.url), encoding="utf-8")
    started: list[Extender] = []

    def start() -> Extender:
        started.append(Extender(kubeconfig))
        return started[-1]

    yield start
    for extender in started:
        extender.stop()


def assert_converged(fake: FakeApiServer) -> None:
    """No device twice, every reservation names a live pod bound to the claim's node, every
    allocated claim protected by the finalizer, no allocation nobody may use."""
    assert_consistent(fake)
    pods = {p["metadata"]["uid"]: p for p in fake.objects("Pod")}
    for claim in fake.objects("ResourceClaim", group="resource.k8s.io"):
        status = claim.get("status") or {}
        allocation = status.get("allocation")
        for ref in status.get("reservedFor") or ():
            pod = pods.get(ref["uid"])
            assert pod is not None, f"{claim['metadata']['name']} reserved for a pod that does not exist"
            pool = allocation["devices"]["results"][0]["pool"]
            assert pod["spec"].get("nodeName") == pool, f"{ref['name']} bound elsewhere than its claim"
        if allocation:
            assert DELETE_PROTECTION in claim["metadata"].get("finalizers", [])


async def retried(attempt: Callable[[], Awaitable[str | None]], timeout: float = 30) -> str | None:
    """kube-scheduler's retries (with a short backoff) until the pod is placed or time is up: the
    extender's watch shows the controller's cleanup a moment after it happened. ``timeout`` is a
    bound against a hang, generous for a loaded machine."""
    async with asyncio.timeout(timeout):
        while (node := await attempt()) is None:
            await asyncio.sleep(0.05)
    return node


def seed(fake: FakeApiServer) -> None:
    # one node, two GPUs, three pods: a device given twice or leaked shows at once
    for obj in m.cluster(*(x for i in (1, 2, 3) for x in (m.claim(f"c{i}"), m.pod(f"p{i}", f"c{i}"))), nodes=1):
        fake.put_object(obj)


async def crash_mid_bind(fake: FakeApiServer, first: Extender, session: aiohttp.ClientSession, step: str) -> None:
    """Start p1's bind on ``first`` and SIGKILL it at ``step``."""
    method, path = STEPS[step]
    if step == "binding made":
        fake.lose_answer("POST", r"/pods/p1/binding$")
    fake.hang(method, path)
    body = {"PodName": "p1", "PodNamespace": "default", "PodUID": "uid-p1", "Node": "node-1"}
    bind = asyncio.create_task(first.post(session, "bind", body))
    await until(lambda: bool(fake.requests_to(method, path)))
    first.kill()
    with pytest.raises(aiohttp.ClientError):
        await bind
    fake.clear_faults()
    fake.release_hangs()


async def killed_and_restarted(
    fake: FakeApiServer, harness: Callable[[], Extender], session: aiohttp.ClientSession, step: str
) -> Extender:
    """A first process killed at ``step`` of p1's bind, and the second one, ready."""
    first = harness()
    await first.ready(session)
    await crash_mid_bind(fake, first, session, step)
    second = harness()
    await second.ready(session)
    return second


@pytest.mark.parametrize("step", list(STEPS))
async def test_killed_mid_bind_the_retry_converges(fake: FakeApiServer, harness: Any, step: str) -> None:
    seed(fake)
    async with aiohttp.ClientSession() as session, ReservationController(fake):
        second = await killed_and_restarted(fake, harness, session, step)
        if step == "binding made":
            assert node_of(fake, "p1") == "node-1"  # kube-scheduler sees it bound: no retry
        else:
            assert node_of(fake, "p1") is None
            assert await second.schedule(session, "p1", "c1", ["node-1"]) == "node-1"  # the retry
        assert await second.schedule(session, "p2", "c2", ["node-1"]) == "node-1"
        assert await second.schedule(session, "p3", "c3", ["node-1"]) is None  # two GPUs, two pods
        claim = claim_in_fake(fake, "c1")
        assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]
        assert_converged(fake)


@pytest.mark.parametrize("step", list(STEPS))
async def test_killed_mid_bind_then_the_pod_goes_away(fake: FakeApiServer, harness: Any, step: str) -> None:
    seed(fake)
    async with aiohttp.ClientSession() as session, ReservationController(fake):
        second = await killed_and_restarted(fake, harness, session, step)
        fake.delete_object("Pod", "default", "p1")  # the user gives up on p1
        # the resourceclaim controller frees c1 (its reservation named a pod that is gone), so
        # both other pods fit on the two GPUs
        await until(lambda: not (claim_in_fake(fake, "c1").get("status") or {}).get("allocation"))
        if step != "finalizer written":
            # it removed the last reservation: the finalizer goes with the allocation
            await until(lambda: DELETE_PROTECTION not in claim_in_fake(fake, "c1")["metadata"].get("finalizers", []))
        assert await second.schedule(session, "p2", "c2", ["node-1"]) == "node-1"
        assert await retried(lambda: second.schedule(session, "p3", "c3", ["node-1"])) == "node-1"
        assert_converged(fake)
        # deleting the claim completes: a finalizer left on an unallocated claim (the process died
        # between the two writes) is removed by the controller when the claim is deleted
        fake.delete_object("ResourceClaim", "default", "c1", group="resource.k8s.io")
        await until(lambda: fake.get_object("ResourceClaim", "default", "c1", group="resource.k8s.io") is None)


@pytest.mark.parametrize("step", ["finalizer written", "allocation written"])
async def test_killed_mid_bind_then_the_pod_goes_elsewhere(fake: FakeApiServer, harness: Any, step: str) -> None:
    """node-1 stops being offered for p1 (kube-scheduler's own filters rule it out): the claim
    left allocated there for p1 alone is deallocated by filter (upstream's PostFilter), and the
    retry allocates it afresh where the pod goes; node-1's GPU is free again for the next pod."""
    for obj in m.cluster(m.claim("c1"), m.pod("p1", "c1"), m.claim("c2"), m.pod("p2", "c2"), nodes=2, gpus=1):
        fake.put_object(obj)
    async with aiohttp.ClientSession() as session, ReservationController(fake):
        second = await killed_and_restarted(fake, harness, session, step)
        assert await retried(lambda: second.schedule(session, "p1", "c1", ["node-2"])) == "node-2"
        pool = claim_in_fake(fake, "c1")["status"]["allocation"]["devices"]["results"][0]["pool"]
        assert pool == "node-2"
        assert await retried(lambda: second.schedule(session, "p2", "c2", ["node-1", "node-2"])) == "node-1"
        assert_converged(fake)
