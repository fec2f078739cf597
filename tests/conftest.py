"""Suite-wide settings.

Hypothesis' defaults time each example (a 200 ms deadline) and fail a strategy that generates
slowly (the ``too_slow`` health check): on a loaded or slow machine those fail tests that are right.
No test may depend on the machine's speed (docs/testing.md), so the suite's profile turns both
off; a test's own ``@settings`` still sets its example counts.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("dra-extender", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("dra-extender")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """The random order's seed, also under ``-q`` (which hides pytest-randomly's header line): a
    failure that depends on the order is reproduced with ``--randomly-seed=<it>``."""
    seed = getattr(config.option, "randomly_seed", None)
    if seed is not None and config.pluginmanager.has_plugin("randomly"):
        terminalreporter.write_line(f"random order: --randomly-seed={seed}")
