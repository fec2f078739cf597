"""Backends: where the cluster state comes from and where writes go (embedded or Kubernetes)."""
