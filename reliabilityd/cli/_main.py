"""The ``reliabilityd`` command line: one parser, verbs registered by their modules."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from reliabilityd.cli import _daemon, _gate, _history, _ingest, _oncall, _query, _ui
from reliabilityd.cli._common import Exit

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reliabilityd",
        description="Live pass@k / pass^k reliability numbers for agent trials.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _daemon.add_parsers(sub)
    _query.add_parsers(sub)
    _ingest.add_parsers(sub)
    _gate.add_parsers(sub)
    _oncall.add_parsers(sub)
    _history.add_parsers(sub)
    _ui.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except Exit as exit_:
        return exit_.code
    return code


if __name__ == "__main__":
    sys.exit(main())
