"""The stored facts every decision reads: the object store, the in-flight ledger, the view over
both (``ClusterView``), which claims a pod uses, the remembered verdicts and the nominations."""
