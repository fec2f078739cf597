"""dra-extender: a kube-scheduler extender for Kubernetes Dynamic Resource Allocation."""

__version__ = "0.1.0"
