"""Suite-wide settings.

Hypothesis' defaults time each example (a 200 ms deadline) and fail a strategy that generates
slowly (the ``too_slow`` health check): on a loaded or slow machine those fail tests that are right.
No test may depend on the machine's speed (docs/testing.md), so the suite's profile turns both
off; a test's own ``@settings`` still sets its example counts.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile("dra-extender", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("dra-extender")
