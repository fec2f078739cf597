"""Typed application keys (``web.AppKey``): the only way handlers reach shared state."""

from __future__ import annotations

from aiohttp import web

from extender.server.metrics import Metrics
from extender.server.settings import ServerSettings
from extender.server.wire import EncodedAnswers
from extender.state.service import SchedulingService

__all__ = ["FILTER_ANSWERS", "METRICS", "SERVICE", "SETTINGS"]

SERVICE = web.AppKey("service", SchedulingService)
SETTINGS = web.AppKey("settings", ServerSettings)
METRICS = web.AppKey("metrics", Metrics)
FILTER_ANSWERS = web.AppKey("filter_answers", EncodedAnswers)
