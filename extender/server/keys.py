"""Typed application keys (``web.AppKey``): the only way handlers reach shared state."""

from __future__ import annotations

from aiohttp import web

from extender.server.metrics import Metrics
from extender.server.settings import ServerSettings
from extender.server.wire import EncodedAnswers
from extender.state.service import SchedulingService
from extender.views.debug import DebugViews

__all__ = ["FILTER_ANSWERS", "METRICS", "SERVICE", "SETTINGS", "VIEWS"]

SERVICE = web.AppKey("service", SchedulingService)
SETTINGS = web.AppKey("settings", ServerSettings)
#: The read models over the service (explain, why, the debug views, the device map's explanations).
VIEWS = web.AppKey("views", DebugViews)
METRICS = web.AppKey("metrics", Metrics)
FILTER_ANSWERS = web.AppKey("filter_answers", EncodedAnswers)
