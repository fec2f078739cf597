"""Authentication against the strict fake API server with authentication on (issue 22): every kind
of credential a user can give reaches the API server on every request, LIST, WATCH and writes.

- a kubeconfig ``token``: the watches sync and a bind's three writes carry it; a wrong token (and
  no token) gets 401, ``start`` fails naming the credentials sent, and the refusal is logged once;
- the in-cluster service account over TLS (token and ``ca.crt`` in a folder of the test's,
  ``KUBERNETES_SERVICE_HOST``/``PORT`` set): it authenticates, and after the token file is
  rewritten (as the kubelet rotates it) the next requests and the re-opened watches carry the new
  token, with no clock involved (the file's status changed);
- a kubeconfig ``tokenFile`` (relative to the kubeconfig), rotated the same way;
- an exec plugin (a script printing an ExecCredential): run once at start, not per request; after a
  401 it runs again and the request is sent once more with its new token; expiry by an injected
  clock, and concurrent requests wait for one run;
- basic auth (``username``/``password``);
- a credential refused mid-run: the watches fail, ``/readyz`` answers 503 saying which watch was
  refused and with what credentials, each refusal logged once;
- the header value: exactly one scheme word, whatever a ``Configuration`` holds.

Run against both ends of the kubernetes-asyncio range pyproject.toml allows (30.1.0 and 36.1.0).
Certificates come from the ``openssl`` command (the TLS test skips without it).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from extender.backends.kube import AccessDenied, ClusterConfig, KubeBackend, KubeClient, KubeSettings, WatchSettings
from extender.backends.kube.config import load_cluster_config
from extender.backends.kube.credentials import ExecPlugin, TokenFile, bearer, header_value
from extender.backends.kube.errors import CredentialsUnavailable
from extender.server import create_app
from extender.state.service import SchedulingService
from tests import manifests as m
from tests.controlplane.pki import Authority
from tests.fakes import FakeApiServer

from .test_backend import until

FAST = WatchSettings(backoff_initial=0.01, backoff_max=0.05, jitter=0, inactivity_timeout=60)
SETTINGS = KubeSettings(watch=FAST, freeze_gc=False, requeue=None)
#: The kinds the backend watches against the fake's default server (no classic DRA).
WATCHED = 7


def write_kubeconfig(path: Path, url: str, user: dict[str, Any]) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "someone", "user": user}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "someone"}}],
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def rotate(path: Path, token: str) -> None:
    """Replace the file as the kubelet does: write a new file, then rename it over the old one."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(token, encoding="utf-8")
    os.replace(fresh, path)


def refused(fake: FakeApiServer) -> list[str]:
    return [f"{r.method} {r.path}" for r in fake.requests if r.status == 401]


@pytest.fixture
async def backends() -> AsyncIterator[list[KubeBackend]]:
    """Backends a test started, stopped at its end whatever happened."""
    started: list[KubeBackend] = []
    yield started
    for backend in started:
        await backend.stop()


async def start(backends: list[KubeBackend], source: Callable[[], Awaitable[ClusterConfig]]) -> KubeBackend:
    backend = KubeBackend(source, settings=SETTINGS)
    backends.append(backend)
    await backend.start()
    await backend.wait_synced(10)
    return backend


def from_kubeconfig(path: Path) -> Callable[[], Awaitable[ClusterConfig]]:
    async def load() -> ClusterConfig:
        return await load_cluster_config(str(path), in_cluster=False)

    return load


# --- kubeconfig token ----------------------------------------------------------------------------


async def test_kubeconfig_token_syncs_the_watches_and_binds(
    fake: FakeApiServer, tmp_path: Path, backends: list[KubeBackend]
) -> None:
    fake.token = "tok-1"
    for obj in m.cluster(m.claim("c1"), m.pod("p1", "c1")):
        fake.put_object(obj)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fake.url, {"token": "tok-1"})
    backend = await start(backends, from_kubeconfig(kubeconfig))
    assert backend.client is not None
    assert backend.client.config.identity == f"bearer token (kubeconfig {kubeconfig})"
    await fake.wait_for_watches(WATCHED)
    service = SchedulingService(backend=backend)
    assert service.filter(m.pod("p1", "c1"), ["node-1"]).node_names == ["node-1"]
    await service.bind("default", "p1", "uid-p1", "node-1")
    assert (fake.get_object("Pod", "default", "p1") or {})["spec"]["nodeName"] == "node-1"
    writes = [r for r in fake.requests if r.method in ("PUT", "POST")]
    assert [r.status for r in writes] == [200, 200, 201]  # finalizer, status, binding: all authenticated
    assert any(r.is_watch for r in fake.requests)
    assert refused(fake) == []


async def test_wrong_token_is_refused_named_and_logged_once(fake: FakeApiServer, tmp_path: Path) -> None:
    fake.token = "right"
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fake.url, {"token": "wrong"})
    config = await load_cluster_config(str(kubeconfig), in_cluster=False)
    client = KubeClient(config)
    try:
        with capture_logs() as logs:
            for _ in range(3):  # a retrying caller: one log line, three errors
                with pytest.raises(AccessDenied) as info:
                    await client.request("GET", "/api/v1/nodes", verb="list", resource="nodes")
            with pytest.raises(AccessDenied):
                await client.request("GET", "/api/v1/pods", verb="list", resource="pods")
    finally:
        await client.close()
    message = str(info.value)
    assert "unauthorized (no valid credentials): cannot list nodes (HTTP 401)" in message
    assert f"[sent: bearer token (kubeconfig {kubeconfig})]" in message
    denied = [e for e in logs if e["event"] == "kube.access_denied"]
    assert [(e["status"], e["verb"], e["resource"]) for e in denied] == [(401, "list", "nodes"), (401, "list", "pods")]
    assert denied[0]["credentials"] == f"bearer token (kubeconfig {kubeconfig})"
    assert len(refused(fake)) == 4  # the fake did refuse every one of them


async def test_start_without_credentials_says_none_were_sent(fake: FakeApiServer, tmp_path: Path) -> None:
    fake.token = "needed"
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fake.url, {})
    backend = KubeBackend.from_kubeconfig(str(kubeconfig), settings=SETTINGS)
    with pytest.raises(AccessDenied, match=r"cannot get /version \(HTTP 401\).*\[sent: no credentials \(kubeconfig"):
        await backend.start()
    await backend.stop()


# --- in-cluster, over TLS --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cluster CA (``ca.crt``) and an API server certificate for 127.0.0.1 signed by it
    (``server.crt``/``server.key``): the control-plane tier's PKI maker."""
    folder = tmp_path_factory.mktemp("pki")
    Authority(folder, "ca", "cluster-ca").issue(
        "server", "kube-apiserver", server=True, hosts=("127.0.0.1", "kubernetes.default.svc")
    )
    return folder


async def test_in_cluster_over_tls_follows_token_rotation(
    aiohttp_server: Any, pki: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backends: list[KubeBackend]
) -> None:
    fake = FakeApiServer(bookmark_interval=None, token="sa-token-1")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(str(pki / "server.crt"), str(pki / "server.key"))
    server = await aiohttp_server(fake.app, ssl=tls)
    fake.url = str(server.make_url("")).rstrip("/")
    for obj in m.cluster(m.pod("p1")):
        fake.put_object(obj)
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("sa-token-1\n", encoding="utf-8")  # a trailing newline is not sent
    shutil.copy(pki / "ca.crt", account / "ca.crt")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.port))

    async def in_cluster() -> ClusterConfig:  # no kubeconfig and the service host set: in-cluster
        return await load_cluster_config(service_account_dir=str(account))

    backend = await start(backends, in_cluster)
    assert backend.client is not None
    config = backend.client.config
    assert (config.host, config.source, config.ca_file) == (fake.url, "in-cluster", str(account / "ca.crt"))
    assert fake.url.startswith("https://127.0.0.1:")
    assert config.identity == f"service account token {account / 'token'} (in-cluster)"
    await fake.wait_for_watches(WATCHED)
    assert refused(fake) == []

    # The kubelet rotates the token; the API server stops accepting the old one.
    rotate(account / "token", "sa-token-2")
    fake.token = "sa-token-2"
    fake.clear_requests()
    assert (await backend.get_pod("default", "p1") or {})["metadata"]["name"] == "p1"
    fake.drop_watches()  # every reflector watches again, with the token it reads now
    await until(lambda: sum(1 for r in fake.requests if r.is_watch and r.status == 200) >= WATCHED)
    assert refused(fake) == [] and backend.synced and backend.failure is None


async def test_in_cluster_without_the_files_fails_to_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(Exception, match="token file does not exist"):
        await load_cluster_config(in_cluster=True, service_account_dir=str(tmp_path))


# --- kubeconfig tokenFile, basic auth ----------------------------------------------------------------


async def test_kubeconfig_token_file_is_read_again_when_rotated(
    fake: FakeApiServer, tmp_path: Path, backends: list[KubeBackend]
) -> None:
    fake.token = "file-1"
    (tmp_path / "secrets").mkdir()
    token_file = tmp_path / "secrets" / "token"
    token_file.write_text("file-1", encoding="utf-8")
    fake.put_object(m.pod("p1"))
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fake.url, {"tokenFile": "secrets/token"})  # relative
    backend = await start(backends, from_kubeconfig(kubeconfig))
    assert backend.client is not None
    assert backend.client.config.identity == f"bearer token from {token_file} (kubeconfig {kubeconfig})"
    await fake.wait_for_watches(WATCHED)  # every request so far was sent with the first token
    rotate(token_file, "file-2")
    fake.token = "file-2"
    fake.clear_requests()
    assert await backend.get_pod("default", "p1") is not None
    fake.drop_watches()
    await until(lambda: sum(1 for r in fake.requests if r.is_watch and r.status == 200) >= WATCHED)
    assert refused(fake) == []


async def test_basic_auth(fake: FakeApiServer, tmp_path: Path, backends: list[KubeBackend]) -> None:
    fake.basic_auth = ("alice", "s3cret")
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fake.url, {"username": "alice", "password": "s3cret"})
    backend = await start(backends, from_kubeconfig(kubeconfig))
    assert backend.client is not None
    assert backend.client.config.identity.startswith("basic auth (user alice)")
    assert refused(fake) == []
    fake.basic_auth = ("alice", "changed")
    with pytest.raises(AccessDenied, match=r"HTTP 401.*\[sent: basic auth \(user alice\)"):
        await backend.get_pod("default", "nobody")


# --- exec plugin ---------------------------------------------------------------------------------


def exec_plugin(tmp_path: Path) -> tuple[Path, Path, Path]:
    """An exec credential plugin: prints the token in ``token`` as an ExecCredential and adds a line
    to ``runs`` each time it runs. (The script is the command itself, with a shebang: 30.x does not
    pass ``args`` through properly.)"""
    token, runs, script = tmp_path / "plugin-token", tmp_path / "plugin-runs", tmp_path / "plugin"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib\n"
        f"pathlib.Path({str(runs)!r}).open('a').write('run\\n')\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1', 'kind': 'ExecCredential',\n"
        f"                  'status': {{'token': pathlib.Path({str(token)!r}).read_text()}}}}))\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return script, token, runs


async def test_exec_plugin_runs_once_then_again_after_a_401(
    fake: FakeApiServer, tmp_path: Path, backends: list[KubeBackend]
) -> None:
    script, token, runs = exec_plugin(tmp_path)
    token.write_text("exec-1", encoding="utf-8")
    fake.token = "exec-1"
    fake.put_object(m.pod("p1"))
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(script)}}
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fake.url, user)
    backend = await start(backends, from_kubeconfig(kubeconfig))
    assert backend.client is not None
    assert backend.client.config.identity == f"bearer token from the exec plugin {script} (kubeconfig {kubeconfig})"
    await fake.wait_for_watches(WATCHED)
    assert runs.read_text().count("run") == 1  # by the loader; not once per request
    assert refused(fake) == []

    token.write_text("exec-2", encoding="utf-8")  # what the plugin would get from its provider now
    fake.token = "exec-2"
    fake.clear_requests()
    with capture_logs() as logs:
        assert await backend.get_pod("default", "p1") is not None
    assert runs.read_text().count("run") == 2
    assert [r.status for r in fake.requests] == [401, 200]  # refused once, then sent with the new token
    assert not [e for e in logs if e["event"] == "kube.access_denied"]


async def test_exec_plugin_renews_at_expiry_once_for_concurrent_requests() -> None:
    now = [1000.0]
    entered, release = asyncio.Event(), asyncio.Event()
    issued = iter(["second", "third"])

    async def run() -> dict[str, Any]:
        entered.set()
        await release.wait()
        return {"token": next(issued), "expirationTimestamp": "1970-01-01T00:33:20Z"}  # 2000 s

    plugin = ExecPlugin(run, command="fake-plugin", clock=lambda: now[0], token="first", expires=1500.0)
    assert await plugin.header() == "Bearer first"
    assert plugin.runs == 0
    now[0] = 1500.0  # expired
    waiting = [asyncio.create_task(plugin.header()) for _ in range(5)]
    await entered.wait()
    release.set()
    assert await asyncio.gather(*waiting) == ["Bearer second"] * 5
    assert plugin.runs == 1
    now[0] = 1999.0
    assert await plugin.header() == "Bearer second"
    now[0] = 2000.0
    assert await plugin.header() == "Bearer third"
    assert plugin.runs == 2


async def test_exec_plugin_failure_is_transient_and_names_the_plugin() -> None:
    async def run() -> dict[str, Any]:
        raise OSError("no such command")

    plugin = ExecPlugin(run, command="missing-plugin")
    with pytest.raises(CredentialsUnavailable, match="the exec plugin missing-plugin failed: no such command"):
        await plugin.header()

    async def certificates() -> dict[str, Any]:
        return {"clientCertificateData": "...", "clientKeyData": "..."}

    with pytest.raises(CredentialsUnavailable, match="gave no token"):
        await ExecPlugin(certificates, command="cert-plugin").header()


# --- refused mid-run: /readyz says why ------------------------------------------------------------


async def test_readyz_says_which_watch_was_refused_and_with_what(
    fake: FakeApiServer, tmp_path: Path, aiohttp_client: Any
) -> None:
    """A credential refused mid-run: the kinds are not synced (their caches may be stale), filter
    answers "not synced", /readyz says which requests were refused and with what, each refusal is
    logged once; once the API server takes the credential again, the watches recover on their own
    (client-go's reflector retries a refusal too: no restart needed)."""
    fake.token = "before"
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fake.url, {"token": "before"})
    backend = KubeBackend.from_kubeconfig(str(kubeconfig), settings=SETTINGS)
    service = SchedulingService(backend=backend)
    client = await aiohttp_client(create_app(service))  # starts the backend
    await backend.wait_synced(30)
    await until(lambda: service.warmed)  # the warm-up after the sync
    assert (await client.get("/readyz")).status == 200
    with capture_logs() as logs:
        fake.token = "after"  # the API server no longer accepts our (static) token
        fake.drop_watches()
        await until(lambda: all(not r.synced for r in backend.reflectors.values()))
        answer = await client.get("/readyz")
        body = await answer.json()
    assert answer.status == 503 and body["status"] == "not ready" and body["reason"] == "cache not synced yet"
    assert body["detail"].startswith("waiting for a complete list of ")
    assert "unauthorized (no valid credentials): cannot " in body["detail"]
    assert f"(HTTP 401): Unauthorized [sent: bearer token (kubeconfig {kubeconfig})]; retrying" in body["detail"]
    denied = [(e["verb"], e["resource"]) for e in logs if e["event"] == "kube.access_denied"]
    assert denied and len(denied) == len(set(denied))  # each refused request logged once
    assert backend.failure is None
    fake.token = "before"  # taken again (a webhook back, RBAC fixed): the watches recover
    await until(lambda: backend.synced)
    assert (await client.get("/readyz")).status == 200


async def test_readyz_detail_names_kinds_not_listed_yet(fake: FakeApiServer, backends: list[KubeBackend]) -> None:
    fake.fail("GET", "/apis/resource.k8s.io/v1/resourceslices", status=503, times=None, message="etcd is down")
    backend = KubeBackend(ClusterConfig(host=fake.url), settings=KubeSettings(watch=FAST, freeze_gc=False,
                          requeue=None, check_access=False))  # fmt: skip
    backends.append(backend)
    assert backend.not_ready_reason == "the Kubernetes backend is not started"
    await backend.start()
    await until(lambda: bool(backend.reflectors["ResourceSlice"].problem))
    reason = backend.not_ready_reason
    assert reason.startswith("waiting for a complete list of resourceslices.resource.k8s.io")
    assert "list resourceslices.resource.k8s.io failed, retrying: " in reason and "etcd is down" in reason


# --- the header value ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "prefix", "expected"),
    [
        ("Bearer tok", None, "Bearer tok"),  # what every loader stores, 30.1 to 36.1
        ("tok", "Bearer", "Bearer tok"),  # a bare token with the prefix set
        ("Bearer tok", "Bearer", "Bearer tok"),  # both: still once
        ("tok", None, "Bearer tok"),
        ("bearer tok\n", None, "Bearer tok"),
        ("Basic YWxpY2U6czNjcmV0", None, "Basic YWxpY2U6czNjcmV0"),
    ],
)
def test_header_value_has_one_scheme(value: str, prefix: str | None, expected: str) -> None:
    assert header_value(value, prefix, "test") == expected


@pytest.mark.parametrize("value", ["Bearer a b", "Token tok", "Bearer tok\x00", ""])
def test_header_value_refuses_what_is_not_a_credential(value: str) -> None:
    with pytest.raises(CredentialsUnavailable):
        header_value(value, None, "test")


def test_bearer_refuses_a_token_that_would_break_the_header() -> None:
    assert bearer(" tok\n", "file") == "Bearer tok"
    with pytest.raises(CredentialsUnavailable, match="whitespace or control characters"):
        bearer("tok\r\nX-Injected: 1", "file")


async def test_token_file_keeps_the_last_token_while_the_file_is_missing_or_empty(tmp_path: Path) -> None:
    path = tmp_path / "token"
    with pytest.raises(CredentialsUnavailable, match="cannot read the token file"):
        await TokenFile(str(path)).header()
    path.write_text("one", encoding="utf-8")
    source = TokenFile(str(path))
    assert await source.header() == "Bearer one"
    path.unlink()
    assert await source.header() == "Bearer one"
    path.write_text("", encoding="utf-8")
    assert await source.header() == "Bearer one"
    rotate(path, "two")
    assert await source.header() == "Bearer two"
    assert not await source.refresh("Bearer two")  # a 401 with the file unchanged: nothing to retry
