"""Verbs that run things: ``run`` (the daemon), ``check`` (its health), ``demo``."""

from __future__ import annotations

import argparse
from pathlib import Path

from reliabilityd.cli._common import add_redis_options, load_config, redis_target, say

__all__ = ["add_parsers"]


def _embedded_options(parser: argparse.ArgumentParser, *, data_dir_help: str) -> None:
    parser.add_argument("--data-dir", type=Path, help=data_dir_help)
    parser.add_argument(
        "--servers",
        choices=["auto", "system", "package"],
        default="auto",
        help="embedded servers from the system, from Python packages, or the system's "
        "when usable (auto)",
    )


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser(
        "demo",
        help="a live fleet of agents, the daemon and an alert that fires and resolves, "
        "on embedded servers",
    )
    demo.add_argument(
        "--duration", type=float, default=90.0, help="seconds to run (default 90); Ctrl-C stops"
    )
    demo.add_argument("--no-live", action="store_true", help="plain lines instead of the live view")
    _embedded_options(demo, data_dir_help="keep the servers' data here (default: a temporary one)")
    demo.set_defaults(handler=_demo)
    run = sub.add_parser("run", help="run the daemon")
    run.add_argument("-c", "--config", help="TOML config file (optional with --embedded)")
    run.add_argument("--log-level", default="INFO")
    run.add_argument(
        "--embedded",
        action="store_true",
        help="start Redis and an MQTT broker too (the system's, else the Python packages')",
    )
    _embedded_options(
        run, data_dir_help="the embedded servers' data (default ~/.local/share/reliabilityd)"
    )
    run.set_defaults(handler=_run)
    chk = add_redis_options(
        sub.add_parser("check", help="exit 0 when this instance's heartbeat is fresh")
    )
    chk.set_defaults(handler=_check)


def _demo(args: argparse.Namespace) -> int:
    from reliabilityd.embedded import demo

    return demo.main(
        duration=args.duration, no_live=args.no_live, mode=args.servers, data_dir=args.data_dir
    )


def _run(args: argparse.Namespace) -> int:
    import asyncio

    from reliabilityd import logs

    if args.embedded:
        from reliabilityd.embedded import _servers as embedded
        from reliabilityd.locate import default_datadir

        return embedded.run(
            load_config(args.config),
            datadir=args.data_dir or default_datadir(),
            mode=args.servers,
            log_level=args.log_level,
            config_path=args.config,
        )
    if not args.config:
        say("-c/--config is required (or run --embedded)")
        return 2
    from reliabilityd.daemon import main

    cfg = load_config(args.config)
    logs.setup(args.log_level)
    return asyncio.run(main(cfg, args.config))  # SIGHUP reloads args.config


def _check(args: argparse.Namespace) -> int:
    import asyncio

    from reliabilityd.daemon import check

    target = redis_target(args)
    return asyncio.run(check(target.configured(), where=target.describe()))
