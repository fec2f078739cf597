"""The embedded backend: an in-memory cluster from manifests that also plays the resourceclaim
controller (``cluster.py``, ``claims.py``), with API-server write rules (``validation.py``) and
fault injection for tests (``faults.py``)."""

from .cluster import EmbeddedBackend, Listener
from .faults import OPERATIONS, FaultInjector

__all__ = ["OPERATIONS", "EmbeddedBackend", "FaultInjector", "Listener"]
