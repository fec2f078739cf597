"""Device-aware preemption: driven by filter (``devices.py``) and kube-scheduler's ``preempt`` verb
(``verb.py``)."""
