"""Where the API server is and how to authenticate: ``ClusterConfig`` and its loaders.

kubernetes-asyncio is used for one thing only: reading a kubeconfig (path, context, exec plugins,
client certificates) or the in-cluster service account into its ``Configuration``. We copy what we
need out of it (host, TLS files, the Authorization header source) and talk HTTP ourselves
(``client.py``), because decoding into its generated models costs many times what orjson's
dicts cost.
Its import costs ~350 ms, so it happens inside ``load_cluster_config``, not at module import.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ClusterConfig", "load_cluster_config"]

#: Returns the value of the Authorization header (or None), fetched per request so rotating
#: service-account tokens and exec-plugin credentials stay fresh.
AuthSource = Callable[[], Awaitable[str | None]]


async def _no_auth() -> str | None:
    return None


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Enough to reach one API server. Tests build it directly: ``ClusterConfig(host=url)``."""

    host: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify_tls: bool = True
    tls_server_name: str | None = None
    auth: AuthSource = field(default=_no_auth, compare=False)
    #: Where it came from, for logs ("kubeconfig /path (context x)", "in-cluster", "explicit").
    source: str = "explicit"

    def ssl_context(self) -> ssl.SSLContext | bool:
        """False for plain http; otherwise a context with the cluster CA and client certificate."""
        if not self.host.startswith("https"):
            return False
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        if not self.verify_tls:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


async def load_cluster_config(
    kubeconfig: str | None = None, *, context: str | None = None, in_cluster: bool | None = None
) -> ClusterConfig:
    """Load credentials: ``in_cluster=True`` forces the service account, False forces a kubeconfig
    (``kubeconfig`` or ``$KUBECONFIG`` or ``~/.kube/config``), None picks in-cluster when no
    kubeconfig path is given and ``KUBERNETES_SERVICE_HOST`` is set."""
    from kubernetes_asyncio import config as kube_config  # slow import, only when used
    from kubernetes_asyncio.client import Configuration

    cfg = Configuration()
    if in_cluster is None:
        in_cluster = kubeconfig is None and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if in_cluster:
        kube_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        source = "in-cluster"
    else:
        paths = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        await _kubeconfig_loader(paths, context).load_and_set(cfg)
        source = f"kubeconfig {paths}"
        if context:
            source += f" (context {context})"
    return _from_configuration(cfg, source)


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


def _from_configuration(cfg: Any, source: str) -> ClusterConfig:
    async def auth() -> str | None:
        # Runs the library's refresh hook (token file re-read, exec plugin) when it has one.
        token: str | None = await cfg.get_api_key_with_prefix("authorization")
        if token:
            return token
        if cfg.username or cfg.password:
            basic: str = cfg.get_basic_auth_token()
            return basic
        return None

    return ClusterConfig(
        host=str(cfg.host).rstrip("/"),
        ca_file=cfg.ssl_ca_cert,
        cert_file=cfg.cert_file,
        key_file=cfg.key_file,
        verify_tls=bool(cfg.verify_ssl),
        tls_server_name=cfg.tls_server_name,
        auth=auth,
        source=source,
    )
