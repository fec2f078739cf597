"""The extender container's exec probes, run for real: the command lines of deploy/ (plain) and
deploy/tls/ (mutual TLS) are executed against a live server built by ``create_app``, with only
the port (and, for TLS, the certificate directory) rewritten to the test's. A probe must succeed
on a healthy, synced server and fail (non-zero exit) when /readyz answers 503 or nothing listens,
and the TLS probe must present the client certificate mutual TLS demands.
Certificates are made with the ``openssl`` command (tests skip without it)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from extender.server import ServerSettings, create_app
from extender.server.settings import ssl_context
from tests.deploy.render import DEPLOY, container, find, render
from tests.server.fakes import FakeBackend, FakeService

CERT_DIR = "/etc/dra-extender/tls"


def _probes(directory: Path) -> dict[str, list[str]]:
    deployment = find(render(directory), "Deployment", "dra-extender-scheduler")
    extender = container(deployment, "extender")
    return {name: extender[name]["exec"]["command"] for name in ("startupProbe", "livenessProbe", "readinessProbe")}


#: The probes' own request timeout, and what the tests run them with: a loaded machine may answer
#: later than the kubelet's few seconds, and a probe that passes or fails must do so for its answer.
PROBE_TIMEOUT, TEST_PROBE_TIMEOUT = "timeout=4)", "timeout=60)"


def _localize(command: list[str], port: int, cert_dir: Path | None = None) -> list[str]:
    """The same command for this machine: our interpreter, the test port, the test certificates,
    and a request timeout that only bounds a hang (``TEST_PROBE_TIMEOUT``)."""
    assert command[0] == "python"
    assert PROBE_TIMEOUT in command[2], command  # the script: the rewrite below must not miss it
    out = [sys.executable]
    for arg in command[1:]:
        arg = arg.replace(":8888/", f":{port}/").replace(PROBE_TIMEOUT, TEST_PROBE_TIMEOUT)
        if cert_dir is not None:
            arg = arg.replace(CERT_DIR, str(cert_dir))
        out.append(arg)
    return out


async def _run(command: list[str]) -> int:
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    return await asyncio.wait_for(process.wait(), timeout=120)  # a bound against a hang only


@pytest.fixture
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_plain_probes_pass_on_a_synced_server(aiohttp_server: Any) -> None:
    server = await aiohttp_server(create_app(FakeService().as_service()))
    for name, command in _probes(DEPLOY).items():
        assert await _run(_localize(command, server.port)) == 0, name


async def test_readiness_fails_until_synced(aiohttp_server: Any) -> None:
    backend = FakeBackend(synced=False)
    service = FakeService(backend=backend)
    server = await aiohttp_server(create_app(service.as_service()))
    probes = _probes(DEPLOY)
    assert await _run(_localize(probes["readinessProbe"], server.port)) != 0
    assert await _run(_localize(probes["livenessProbe"], server.port)) == 0, "unsynced is alive, not ready"
    backend.set_synced(True)
    # /readyz also waits for the warm-up that follows the sync (a task of the server's): wait for
    # it rather than race it (failed one clean-clone run, seed 688981995)
    async with asyncio.timeout(120):  # a bound against a hang only
        while not service.warmed:
            await asyncio.sleep(0.01)
    assert await _run(_localize(probes["readinessProbe"], server.port)) == 0


async def test_probes_fail_when_nothing_listens(free_port: int) -> None:
    for name, command in _probes(DEPLOY).items():
        assert await _run(_localize(command, free_port)) != 0, name


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def secret_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files of the Secret dra-extender-tls as docs/deploy.md makes them: ca.crt, server.crt,
    server.key (SAN IP:127.0.0.1), client.crt, client.key."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl command not available")
    d = tmp_path_factory.mktemp("dra-extender-tls")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=dra-extender-ca",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=d)  # fmt: skip
    usage = "keyUsage=critical,digitalSignature,keyEncipherment\n"
    (d / "server.ext").write_text(f"subjectAltName=IP:127.0.0.1,DNS:localhost\n{usage}extendedKeyUsage=serverAuth\n")
    (d / "client.ext").write_text(f"{usage}extendedKeyUsage=clientAuth\n")
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=dra-extender-{name}",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=d)  # fmt: skip
    # the recipe's certificates pass the strict checks too (docs/deploy.md says so; OpenSSL 3 makes
    # them, 1.1 checks less under the same flag)
    _openssl("verify", "-x509_strict", "-CAfile", "ca.crt", "server.crt", "client.crt", cwd=d)
    return d


def _mtls_settings(d: Path) -> ServerSettings:
    return ServerSettings(
        tls_cert_file=str(d / "server.crt"), tls_key_file=str(d / "server.key"), tls_client_ca_file=str(d / "ca.crt")
    )


async def test_tls_probes_pass_with_mutual_tls(aiohttp_server: Any, secret_dir: Path) -> None:
    settings = _mtls_settings(secret_dir)
    server = await aiohttp_server(create_app(FakeService().as_service(), settings), ssl=ssl_context(settings))
    for name, command in _probes(DEPLOY / "tls").items():
        assert await _run(_localize(command, server.port, secret_dir)) == 0, name


async def test_plain_probe_fails_against_tls(aiohttp_server: Any, secret_dir: Path) -> None:
    """The overlay must replace every probe: the plain one cannot talk to the TLS listener."""
    settings = _mtls_settings(secret_dir)
    server = await aiohttp_server(create_app(FakeService().as_service(), settings), ssl=ssl_context(settings))
    assert await _run(_localize(_probes(DEPLOY)["readinessProbe"], server.port)) != 0


async def test_tls_probe_without_client_certificate_is_refused(aiohttp_server: Any, secret_dir: Path) -> None:
    settings = _mtls_settings(secret_dir)
    server = await aiohttp_server(create_app(FakeService().as_service(), settings), ssl=ssl_context(settings))
    command = _localize(_probes(DEPLOY / "tls")["readinessProbe"], server.port, secret_dir)
    # Same command, but the client pair is the server's own (not valid for client auth) -> refused.
    swapped = [a.replace("client.crt", "server.crt").replace("client.key", "server.key") for a in command]
    assert await _run(swapped) != 0
