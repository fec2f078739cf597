"""The ``Backend`` protocol every backend implements (defined in ``extender.state.backend``, the
layer that depends on it; re-exported here for the implementations)."""

from extender.state.backend import Backend

__all__ = ["Backend"]
