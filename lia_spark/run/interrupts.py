"""The signals that stop a command (Ctrl-C, SIGTERM), for code below the CLI that catches ``Exception`` to go on.

The CLI's handler records the signal here, cancels the running Spark jobs and raises the signal's exception. A
Spark call the signal interrupts may still end in an ordinary error instead (the job was cancelled, or pyspark's
clean-up read the cancellation from the interrupted py4j connection, replacing the signal's exception): code that
records a failure and goes on (a failing audit-table cell, a best-effort MLflow call) calls :func:`check` first, so
a stopped command unwinds instead of starting its next piece of work.
"""
from __future__ import annotations

import signal


class Terminated(BaseException):
    """SIGTERM reached the command (a scheduler or `kill` stops it): unwinds like Ctrl-C's KeyboardInterrupt."""


SIGNAL_EXITS: dict[int, tuple[int, type[BaseException]]] = {signal.SIGINT: (130, KeyboardInterrupt),
                                                            signal.SIGTERM: (143, Terminated)}
received: list[int] = []  # the signals that stopped this command (the CLI's exit code and line)


def check() -> None:
    """Raise the exception of the first signal that stopped this command, if one did (else return)."""
    if received:
        raise SIGNAL_EXITS[received[0]][1]()
