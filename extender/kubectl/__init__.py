"""``kubectl dra``: why a pod does not fit, the devices of the cluster, and what-if scheduling.

Installed as the console script ``kubectl-dra``, which kubectl runs as the plugin ``kubectl dra``::

    kubectl dra why NAMESPACE/POD            (or: why POD -n NAMESPACE)
    kubectl dra devices [--node NODE]
    kubectl dra simulate -f manifests.yaml   (claims, templates and pods added to the cluster)

Sources: the live cluster through a kubeconfig (one LIST per kind, explained locally by the
extender's own code, read-only), or ``--extender URL``, a running extender's endpoints. Output:
a table or text by default, ``-o wide``, ``-o json``, ``-o yaml`` (the endpoints' documents).
Errors print one line on stderr and exit 1. docs/kubectl-dra.md describes it all.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import NoReturn, TextIO

__all__ = ["main", "run"]

_FORMATS = ("wide", "json", "yaml")


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit code 1, like kubectl (``err`` is where they go)."""

    err: TextIO = sys.stderr

    def error(self, message: str) -> NoReturn:
        self.err.write(f"error: {message}\n")
        raise SystemExit(1)


def _parser(err: TextIO) -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    source = common.add_argument_group("where the cluster is read from")
    source.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
    source.add_argument("--context", help="kubeconfig context to use")
    source.add_argument(
        "--extender",
        metavar="URL",
        help="ask a running dra-extender instead of the API server (its URL, path prefix included)",
    )
    source.add_argument(
        "--insecure-skip-tls-verify",
        action="store_true",
        help="with --extender: do not verify the extender's TLS certificate",
    )
    common.add_argument("-n", "--namespace", help="namespace of the pod / of manifests without one (default: default)")
    common.add_argument("-o", "--output", choices=_FORMATS, help="wide, json or yaml")

    parser: _Parser = _Parser(
        prog="kubectl dra",
        description="Dynamic Resource Allocation devices: why a pod does not fit, who holds what, what would fit.",
    )
    parser.err = err
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    why = commands.add_parser(
        "why", parents=[common], help="why a pod does not fit: reasons, closest nodes, what would have to change"
    )
    why.add_argument("pod", metavar="[NAMESPACE/]POD")
    devices = commands.add_parser("devices", parents=[common], help="every device, its state and who holds it")
    devices.add_argument("--node", action="append", help="only this node (repeatable)")
    simulate = commands.add_parser(
        "simulate", parents=[common], help="would the pods of these manifests fit, and where (changes nothing)"
    )
    simulate.add_argument(
        "-f", "--filename", action="append", required=True, help="manifest file or directory (YAML/JSON; - for stdin)"
    )
    for sub in (why, devices, simulate):
        if isinstance(sub, _Parser):
            sub.err = err
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The console script ``kubectl-dra``."""
    _quiet_logs()
    try:
        return asyncio.run(run(argv))
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 1
    except BrokenPipeError:
        # the reader went away (``kubectl dra devices | head``): stop quietly, as kubectl does;
        # stdout goes to /dev/null so that the interpreter's own flush at exit cannot fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


async def run(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """``main`` inside a running event loop, printing to ``out`` and ``err`` (default: stdout and
    stderr); the tests call it."""
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    try:
        args = _parser(err).parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    from . import commands  # the scheduling code, only once the arguments are good

    try:
        await commands.dispatch(args, out, err)
    except commands.FAILURES as exc:
        err.write(f"error: {exc}\n")
        return 1
    return 0


def _quiet_logs() -> None:
    """The extender's own code logs its decisions (binds in the in-memory copy, ...): a command
    line tool shows only its answer, and only a failure of the libraries on stderr."""
    import logging

    import structlog

    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.getLogger("celpy").setLevel(logging.CRITICAL)
