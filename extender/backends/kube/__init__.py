"""The Kubernetes backend: reflectors feeding the store and writers talking to the API server
through a thin aiohttp client (``client.py``); credentials via kubernetes-asyncio (``config.py``).

Modules: ``config`` (where the server is; kubeconfig and in-cluster loading), ``credentials`` (the
Authorization header of every request, renewed as tokens rotate), ``client`` (HTTP +
``check_response``), ``errors``,
``discovery`` (served resource.k8s.io version), ``reflector`` (list + watch), ``feeder`` (store
ingest without going back in time), ``backend`` (``KubeBackend``), ``leader`` (Lease following),
``requeue`` (nudging rejected pods).
"""

from extender.state.filter.rejected import RejectedPods

from .backend import KubeBackend, KubeSettings
from .client import ClientSettings, KubeClient, check_response
from .config import ClusterConfig, load_cluster_config
from .errors import AccessDenied, ApiNotServed, Gone, KubeStartupError, ServerUnreachable
from .leader import LeaseSettings
from .reflector import WatchSettings
from .requeue import RequeueSettings

__all__ = [
    "AccessDenied",
    "ApiNotServed",
    "ClientSettings",
    "ClusterConfig",
    "Gone",
    "KubeBackend",
    "KubeClient",
    "KubeSettings",
    "KubeStartupError",
    "LeaseSettings",
    "RejectedPods",
    "RequeueSettings",
    "ServerUnreachable",
    "WatchSettings",
    "check_response",
    "load_cluster_config",
]
