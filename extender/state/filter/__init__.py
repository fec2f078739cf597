"""The filter verb's parts: one read-only ``Attempt`` per request over the remembered verdicts, then
its effects (tentative holds, rejected-pod bookkeeping, PostFilter's recovery)."""
