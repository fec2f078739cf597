"""State above the core: the object store, the in-flight ledger and the scheduling service."""
