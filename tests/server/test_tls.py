"""Settings helpers (listen address, path prefix, validation) and ``ssl_context``: HTTPS with a
server certificate, and mutual TLS that refuses a client without a certificate from the CA.
Certificates are made with the ``openssl`` command (tests skip without it)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from extender.server import ServerSettings, create_app
from extender.server.settings import normalize_prefix, parse_listen, ssl_context
from extender.tlsverify import as_kubernetes_verifies
from tests.server.fakes import FakeService


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:8888", ("127.0.0.1", 8888)), ("[::1]:9000", ("::1", 9000)), (":80", ("0.0.0.0", 80))],
)
def test_parse_listen(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["8888", "host:", "host:http", "host:70000"])
def test_parse_listen_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="listen address"):
        parse_listen(text)


@pytest.mark.parametrize(("prefix", "expected"), [("", "/"), ("/", "/"), ("v1", "/v1/"), ("/a/b/", "/a/b/")])
def test_normalize_prefix(prefix: str, expected: str) -> None:
    assert normalize_prefix(prefix) == expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_body_bytes": 0}, "max body bytes must be positive"),
        ({"tls_cert_file": "c.pem"}, "both a certificate file and a key file"),
        ({"tls_client_ca_file": "ca.pem"}, "needs a server certificate"),
    ],
)
def test_settings_validation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServerSettings(**kwargs)


def test_plain_http_has_no_context() -> None:
    assert ssl_context(ServerSettings()) is None


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl command not available")
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-extfile", "san.ext", "-out", f"{name}.pem", cwd=d)  # fmt: skip
    return d


def _client_context(pki: Path, *, with_cert: bool) -> ssl.SSLContext:
    """kube-scheduler's side: Go's verification (on Python 3.13 the default context is stricter)."""
    context = as_kubernetes_verifies(ssl.create_default_context(cafile=str(pki / "ca.pem")))
    if with_cert:
        context.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    return context


async def test_https(aiohttp_server: Any, pki: Path) -> None:
    settings = ServerSettings(tls_cert_file=str(pki / "server.pem"), tls_key_file=str(pki / "server.key"))
    server = await aiohttp_server(create_app(FakeService().as_service(), settings), ssl=ssl_context(settings))
    async with aiohttp.ClientSession() as session:
        url = f"https://127.0.0.1:{server.port}/healthz"
        async with session.get(url, ssl=_client_context(pki, with_cert=False)) as response:
            assert response.status == 200


async def test_mutual_tls_needs_a_client_certificate(aiohttp_server: Any, pki: Path) -> None:
    settings = ServerSettings(
        tls_cert_file=str(pki / "server.pem"),
        tls_key_file=str(pki / "server.key"),
        tls_client_ca_file=str(pki / "ca.pem"),
    )
    server = await aiohttp_server(create_app(FakeService().as_service(), settings), ssl=ssl_context(settings))
    url = f"https://127.0.0.1:{server.port}/healthz"
    async with aiohttp.ClientSession() as session:
        async with session.get(url, ssl=_client_context(pki, with_cert=True)) as response:
            assert response.status == 200
        with pytest.raises(aiohttp.ClientError):
            async with session.get(url, ssl=_client_context(pki, with_cert=False)) as response:
                await response.read()


@pytest.mark.parametrize("loop_name", ["uvloop", "asyncio"])
def test_connections_over_tls_are_served_and_counted_on_either_loop(pki: Path, loop_name: str) -> None:
    """Every request passes the connection counter (``dra_extender_http_connections_total``),
    whose way of knowing a connection must hold for each loop's TLS transport: uvloop's cannot be
    weakly referenced. Two requests on one connection, one on another: 2."""
    from aiohttp import web

    from extender.server.eventloop import event_loop_name, new_event_loop

    if event_loop_name(loop_name) != loop_name:
        pytest.skip(f"{loop_name} is not available here")
    settings = ServerSettings(
        tls_cert_file=str(pki / "server.pem"),
        tls_key_file=str(pki / "server.key"),
        tls_client_ca_file=str(pki / "ca.pem"),
    )

    async def scenario() -> str:
        runner = web.AppRunner(create_app(FakeService().as_service(), settings))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context(settings))
        await site.start()
        port = runner.addresses[0][1]
        client = _client_context(pki, with_cert=True)
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1, ssl=client)) as first:
                for _ in range(2):
                    async with first.get(f"https://127.0.0.1:{port}/healthz") as response:
                        assert response.status == 200
                        await response.read()
            async with (
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1, ssl=client)) as second,
                second.get(f"https://127.0.0.1:{port}/metrics") as response,
            ):
                assert response.status == 200
                return await response.text()
        finally:
            await runner.cleanup()

    loop, _ = new_event_loop(loop_name)
    try:
        text = loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert "dra_extender_http_connections_total 2.0" in text.splitlines()


def _verifies_as_go(context: ssl.SSLContext) -> bool:
    return not context.verify_flags & ssl.VERIFY_X509_STRICT and bool(
        context.verify_flags & ssl.VERIFY_X509_PARTIAL_CHAIN
    )


def test_the_api_servers_certificate_is_verified_as_kubernetes_verifies_it() -> None:
    """Python 3.13 made ``create_default_context`` strict (RFC 5280 checks that Go's crypto/x509,
    kubectl's and kube-scheduler's, does not make: a CA without keyUsage is refused) and trusting of
    partial chains; 3.11 and 3.12 do neither. The kube backend verifies as Go does on each
    (``extender.tlsverify``)."""
    from extender.backends.kube.config import ClusterConfig

    context = ClusterConfig(host="https://127.0.0.1:6443").ssl_context()
    assert isinstance(context, ssl.SSLContext) and _verifies_as_go(context)


def test_the_client_certificate_check_is_go_s_on_every_python(pki: Path) -> None:
    """The same for kube-scheduler's client certificate: the fixture's CA, made by ``openssl req
    -x509`` without ``-addext`` (no keyUsage), is refused by a strict check, so the mutual TLS tests
    above fail on Python 3.13 where the extender leaves the check to Python (the next test plays that
    on any Python)."""
    settings = ServerSettings(
        tls_cert_file=str(pki / "server.pem"),
        tls_key_file=str(pki / "server.key"),
        tls_client_ca_file=str(pki / "ca.pem"),
    )
    context = ssl_context(settings)
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED and _verifies_as_go(context)


async def test_a_ca_without_key_usage_is_accepted_where_python_would_be_strict(
    aiohttp_server: Any, pki: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python 3.13's strict default, played on any Python: the extender's context starts strict, and
    kube-scheduler's client certificate from the fixture's CA (no keyUsage, which Go accepts) still
    gets through."""
    import extender.server.settings as settings_module

    python_default = ssl.create_default_context

    def strict_default(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        context = python_default(*args, **kwargs)
        context.verify_flags |= ssl.VERIFY_X509_STRICT
        return context

    monkeypatch.setattr(settings_module.ssl, "create_default_context", strict_default)
    settings = ServerSettings(
        tls_cert_file=str(pki / "server.pem"),
        tls_key_file=str(pki / "server.key"),
        tls_client_ca_file=str(pki / "ca.pem"),
    )
    context = ssl_context(settings)
    monkeypatch.undo()
    server = await aiohttp_server(create_app(FakeService().as_service(), settings), ssl=context)
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"https://127.0.0.1:{server.port}/healthz", ssl=_client_context(pki, with_cert=True)) as answer,
    ):
        assert answer.status == 200
