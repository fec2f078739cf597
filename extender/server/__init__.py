"""The HTTP layer: the aiohttp app kube-scheduler calls (the only place that knows HTTP)."""

from extender.server.app import create_app, run
from extender.server.settings import ServerSettings

__all__ = ["ServerSettings", "create_app", "run"]
