"""The ``reliabilityd`` command line: one parser, verbs registered by their modules."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from reliabilityd.cli import _daemon, _gate, _history, _ingest, _query, _rejected, _runs, _ui
from reliabilityd.cli._common import EXIT_PIPE, Exit

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reliabilityd",
        description="Live pass@k / pass^k reliability numbers for agent trials.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _daemon.add_parsers(sub)
    _query.add_parsers(sub)
    _runs.add_parsers(sub)
    _ingest.add_parsers(sub)
    _gate.add_parsers(sub)
    _rejected.add_parsers(sub)
    _history.add_parsers(sub)
    _ui.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            code = _dispatch(argv)
        finally:
            # A reader that left (`reliabilityd status | head`) shows here at the
            # latest, while the error can still be handled, not at interpreter exit.
            sys.stdout.flush()
    except BrokenPipeError:
        return _stdout_closed()
    return code


def _dispatch(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except Exit as exit_:
        return exit_.code
    return code


def _stdout_closed() -> int:
    """Nobody reads standard output any more: end quietly, as a program SIGPIPE ends.

    What is left in its buffer cannot be written; standard output is pointed
    at /dev/null so that the interpreter's last flush has nowhere to fail.
    """
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a non-file (a test's capture)
        return EXIT_PIPE
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return EXIT_PIPE


if __name__ == "__main__":
    sys.exit(main())
