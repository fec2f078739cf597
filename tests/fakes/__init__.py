"""Fakes of third parties for tests: a strict fake Kubernetes API server (``FakeApiServer``)."""

from .apiserver import FakeApiServer, RequestRecord, Target
from .faults import FaultRule
from .status import ApiError

__all__ = ["ApiError", "FakeApiServer", "FaultRule", "RequestRecord", "Target"]
