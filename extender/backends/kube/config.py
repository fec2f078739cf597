"""Where the API server is and how to authenticate: ``ClusterConfig`` and its loaders.

kubernetes-asyncio is used for one thing only: reading a kubeconfig (path, context, exec plugins,
client certificates) or the in-cluster service account into its ``Configuration``. We copy what we
need out of it (host, TLS files, the credential: ``credentials.py``) and talk HTTP ourselves
(``client.py``), because decoding into its generated models costs many times what orjson's
dicts cost.
Its import costs ~350 ms, so it happens inside ``load_cluster_config``, not at module import.

Versions: tested with kubernetes-asyncio 30.1.0 and 36.1.0 (pyproject.toml pins the range). What
differs between them and matters here: ``Configuration.get_api_key_with_prefix`` is a plain function
in 30 and a coroutine in 36, and ``load_incluster_config`` takes no file names in 30; so neither is
used. Both versions' loaders leave the whole Authorization value (``"Bearer <token>"``,
``"Basic <base64>"``) in ``api_key["BearerToken"]``, never under ``"authorization"`` (asking for that
key, as this module once did, sent no token at all: issue 22).
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from typing import Any

from extender.tlsverify import as_kubernetes_verifies

from .credentials import NO_CREDENTIALS, Credentials, ExecPlugin, StaticHeader, TokenFile, header_value

__all__ = ["SERVICE_ACCOUNT_DIR", "ClusterConfig", "load_cluster_config"]

#: Where the kubelet mounts a pod's ServiceAccount token (``token``) and cluster CA (``ca.crt``).
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Enough to reach one API server. Tests build it directly: ``ClusterConfig(host=url)``."""

    host: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify_tls: bool = True
    tls_server_name: str | None = None
    #: What makes each request's Authorization header (``credentials.py``); none by default.
    credentials: Credentials = field(default=NO_CREDENTIALS, compare=False)
    #: Where it came from, for logs ("kubeconfig /path (context x)", "in-cluster", "explicit").
    source: str = "explicit"

    @property
    def identity(self) -> str:
        """What we authenticate with, for logs and refusals: the credential kind and where it came
        from, e.g. "bearer token from /var/run/secrets/.../token (in-cluster)". (Not the user
        name: a 403 from the API server names it already, and a 401 means it knows none.)"""
        what = self.credentials.describe()
        if self.cert_file and self.host.startswith("https"):
            what = "client certificate" if self.credentials is NO_CREDENTIALS else f"{what} and client certificate"
        return f"{what} ({self.source})"

    def ssl_context(self) -> ssl.SSLContext | bool:
        """False for plain http; otherwise a context with the cluster CA and client certificate."""
        if not self.host.startswith("https"):
            return False
        context = as_kubernetes_verifies(ssl.create_default_context(cafile=self.ca_file))
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        if not self.verify_tls:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


async def load_cluster_config(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    in_cluster: bool | None = None,
    service_account_dir: str = SERVICE_ACCOUNT_DIR,
) -> ClusterConfig:
    """Load credentials: ``in_cluster=True`` forces the service account, False forces a kubeconfig
    (``kubeconfig`` or ``$KUBECONFIG`` or ``~/.kube/config``), None picks in-cluster when no
    kubeconfig path is given and ``KUBERNETES_SERVICE_HOST`` is set. In-cluster, the token and
    ``ca.crt`` are read from ``service_account_dir`` (tests point it at a folder of their own) and
    the host from ``KUBERNETES_SERVICE_HOST`` / ``KUBERNETES_SERVICE_PORT``."""
    from kubernetes_asyncio.client import Configuration  # slow import, only when used

    cfg = Configuration()
    if in_cluster is None:
        in_cluster = kubeconfig is None and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if in_cluster:
        credentials = _load_in_cluster(cfg, service_account_dir)
        source = "in-cluster"
    else:
        paths = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        loader = _kubeconfig_loader(paths, context)
        await loader.load_and_set(cfg)
        source = f"kubeconfig {paths}"
        if context:
            source += f" (context {context})"
        credentials = _kubeconfig_credentials(loader, cfg, source)
    return _from_configuration(cfg, credentials, source)


def _load_in_cluster(cfg: Any, directory: str) -> Credentials:
    """The library's in-cluster loader checks the environment and the files and sets host and CA;
    the token is ours to read (``TokenFile``: again whenever the kubelet rotates it). The loader
    class, not ``load_incluster_config``: only the class takes file names in 30.x."""
    from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader

    token_file = os.path.join(directory, "token")
    loader = InClusterConfigLoader(
        token_filename=token_file,
        cert_filename=os.path.join(directory, "ca.crt"),
        try_refresh_token=False,  # its refresh is a one-minute wall-clock timer; TokenFile's is exact
    )
    loader.load_and_set(cfg)
    return TokenFile(token_file, description=f"service account token {token_file}")


def _kubeconfig_loader(paths: str, context: str | None) -> Any:
    """The library's kubeconfig loader over ``paths`` (files joined by ``os.pathsep``, merged as
    kubectl merges them), ``context`` or the current one. Two differences from the library's
    ``load_kube_config``: ``$KUBECONFIG`` is read now (the library reads it once, at import), and
    the current context is the first file's that sets one (kubectl: the first file to set a value
    wins; the library keeps the last)."""
    from kubernetes_asyncio.config.kube_config import KubeConfigLoader, KubeConfigMerger

    merger = KubeConfigMerger(paths)
    merged = merger.config
    if merged is not None:
        first = next(
            (
                f["current-context"]
                for f in merger.config_files.values()
                if isinstance(f, dict) and f.get("current-context")
            ),
            None,
        )
        if first is not None:
            merged.value["current-context"] = first
    return KubeConfigLoader(
        config_dict=merged, active_context=context, config_base_path=None, config_persister=merger.save_changes
    )


def _kubeconfig_credentials(loader: Any, cfg: Any, source: str) -> Credentials:
    """The credential of the kubeconfig user the loader chose, in the library's own order (auth
    provider, exec plugin, ``token`` / ``tokenFile``, ``username`` + ``password``), with what it
    already read. ``loader._user`` (the user entry, with the path relative files resolve against)
    is private, but present in every version pyproject.toml allows."""
    user = getattr(loader, "_user", None)
    value = cfg.api_key.get("BearerToken")
    header = header_value(str(value), cfg.api_key_prefix.get("BearerToken"), source) if value else None
    if user is None:
        return NO_CREDENTIALS
    provider = getattr(loader, "provider", None)
    if provider and header:
        return StaticHeader(header, f"bearer token from the {provider} auth-provider")
    if "exec" in user:
        if cfg.cert_file and not header:
            return NO_CREDENTIALS  # the plugin gave a client certificate: the TLS context sends it
        return _exec_plugin(loader, user, header)
    if "token" in user and header:
        return StaticHeader(header, "bearer token")
    if "tokenFile" in user:
        base = os.path.dirname(os.path.abspath(user.path)) if getattr(user, "path", None) else ""
        return TokenFile(os.path.join(base, str(user["tokenFile"])))
    if header and header.startswith("Basic "):
        return StaticHeader(header, f"basic auth (user {user['username']})")
    return NO_CREDENTIALS


def _exec_plugin(loader: Any, user: Any, header: str | None) -> ExecPlugin:
    """The loader ran the plugin once already (30.x logs and swallows a failure; then we run it at
    the first request, which raises with the reason); its expiry is an aware datetime."""
    from kubernetes_asyncio.config.exec_provider import ExecProvider

    exec_config = user["exec"]

    async def run() -> Any:
        return await ExecProvider(exec_config).run()

    expiry = getattr(loader, "exec_plugin_expiry", None)
    return ExecPlugin(
        run,
        command=str(exec_config["command"]),
        token=header.removeprefix("Bearer ") if header and header.startswith("Bearer ") else None,
        expires=expiry.timestamp() if expiry is not None else None,
    )


def _from_configuration(cfg: Any, credentials: Credentials, source: str) -> ClusterConfig:
    return ClusterConfig(
        host=str(cfg.host).rstrip("/"),
        ca_file=cfg.ssl_ca_cert,
        cert_file=cfg.cert_file,
        key_file=cfg.key_file,
        verify_tls=bool(cfg.verify_ssl),
        tls_server_name=cfg.tls_server_name,
        credentials=credentials,
        source=source,
    )
