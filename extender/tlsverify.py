"""Certificates verified as Kubernetes' own components verify them, on every Python version.

From Python 3.13, ``ssl.create_default_context`` turns on two verification flags that 3.11 and 3.12
leave off: ``VERIFY_X509_STRICT``, which refuses certificates that Go's ``crypto/x509`` (the one
kube-apiserver, kube-scheduler and kubectl use) accepts, among them a CA without a ``keyUsage``
extension, which ``openssl req -x509`` makes by default; and ``VERIFY_X509_PARTIAL_CHAIN``, which
lets any certificate in the trust file anchor a chain, as a Go root pool does. Left to the Python
version, an extender on 3.13 would refuse kube-scheduler's client certificate (or the API server's)
that the cluster's components accept, and one on 3.11 would refuse a chain anchored at an
intermediate CA. ``as_kubernetes_verifies`` sets both as Go behaves, so that credentials that work
with the cluster work with the extender, whatever Python runs it.
"""

from __future__ import annotations

import ssl

__all__ = ["as_kubernetes_verifies"]


def as_kubernetes_verifies(context: ssl.SSLContext) -> ssl.SSLContext:
    """``context`` with Go's verification: no X.509 strict mode, partial chains trusted. Returns it."""
    context.verify_flags = (context.verify_flags & ~ssl.VERIFY_X509_STRICT) | ssl.VERIFY_X509_PARTIAL_CHAIN
    return context
