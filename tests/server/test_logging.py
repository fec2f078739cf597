"""The cheap stand-ins the request path uses for structlog's own helpers: ``log_context`` binds and
restores exactly as ``bound_contextvars``, and ``UtcIsoTimeStamper`` writes exactly the text of
``TimeStamper(fmt="iso", utc=True)``. The JSON lines of a real server are checked in
``test_cli_serve.py``."""

from __future__ import annotations

import datetime
import re

import pytest
import structlog
from structlog.contextvars import bind_contextvars, bound_contextvars, get_contextvars, merge_contextvars
from structlog.testing import capture_logs

from extender import logconfig
from extender.logconfig import UtcIsoTimeStamper
from extender.server.middleware import log_context


def test_log_context_binds_for_merge_contextvars_and_restores() -> None:
    log = structlog.get_logger()
    before = get_contextvars()
    with bound_contextvars(pod="outer/pod", verb="filter"), capture_logs(processors=[merge_contextvars]) as logs:
        with log_context(pod="ns/pod-a", node="node-1"):
            assert get_contextvars() == {**before, "pod": "ns/pod-a", "node": "node-1", "verb": "filter"}
            log.info("inside")
        assert get_contextvars() == {**before, "pod": "outer/pod", "verb": "filter"}
        log.info("after")
    assert get_contextvars() == before
    assert (logs[0]["pod"], logs[0]["node"], logs[0]["verb"]) == ("ns/pod-a", "node-1", "filter")
    assert logs[1]["pod"] == "outer/pod" and "node" not in logs[1]


def test_log_context_restores_on_errors_and_matches_bound_contextvars() -> None:
    bind_contextvars(request_id="r-1")
    try:
        with pytest.raises(ZeroDivisionError), log_context(request_id="r-2", pod="p"):
            1 / 0  # noqa: B018
        ours = get_contextvars()
        with pytest.raises(ZeroDivisionError), bound_contextvars(request_id="r-2", pod="p"):
            1 / 0  # noqa: B018
        assert ours == get_contextvars() and ours["request_id"] == "r-1" and "pod" not in ours
    finally:
        structlog.contextvars.unbind_contextvars("request_id")


def _theirs(nanos: int) -> str:
    moment = datetime.datetime.fromtimestamp(nanos // 1_000_000_000, tz=datetime.UTC)
    moment = moment.replace(microsecond=nanos // 1000 % 1_000_000)  # datetime.now() truncates too
    return moment.isoformat().replace("+00:00", "Z")  # what TimeStamper(fmt="iso", utc=True) writes


@pytest.mark.parametrize(
    "nanos",
    [
        1_764_499_025_123_456_789,
        1_764_499_025_000_000_000,  # microsecond 0: no fraction, as isoformat
        1_764_499_025_000_000_999,  # under a microsecond: still 0
        1_764_499_025_000_001_000,
        1_764_499_025_999_999_999,
        946_684_799_999_999_000,  # the last microsecond of 1999
        951_782_400_500_000_000,  # 2000-02-29
    ],
)
def test_timestamps_are_the_text_timestamper_writes(monkeypatch: pytest.MonkeyPatch, nanos: int) -> None:
    stamper = UtcIsoTimeStamper()
    for step in (nanos, nanos + 1_000_000_000, nanos):  # the per-second prefix is refreshed, not stuck
        monkeypatch.setattr(logconfig.time, "time_ns", lambda step=step: step)
        assert stamper(None, "info", {})["timestamp"] == _theirs(step)


def test_timestamps_now_have_the_timestamper_format() -> None:
    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    before = timestamper(None, "info", {})["timestamp"]
    ours = UtcIsoTimeStamper()(None, "info", {})["timestamp"]
    after = timestamper(None, "info", {})["timestamp"]
    pattern = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z$")
    assert pattern.match(ours) and pattern.match(before)
    # "now": between two readings of structlog's own (the same clock, truncated alike), not within
    # some seconds of one, which a slow enough machine could exceed
    parse = datetime.datetime.fromisoformat
    assert parse(before) <= parse(ours) <= parse(after)
