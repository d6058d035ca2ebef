"""The ``reliabilityd`` command line: the daemon, emit and import, queries, the demo."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reliabilityd.store._store import Store


def _seed_example() -> int:
    """Print the seed document's worked example from the library."""
    from reliabilityd import estimate, lottery_cases, pass_at_k, pass_hat_k
    from reliabilityd.stats.estimators import METRICS

    passes = [4, 2, 5, 3, 1, 2, 3, 5, 2, 1, 4, 3, 3, 2, 2, 3, 4, 2, 3, 2]
    tasks = [(5, c) for c in passes]
    print(f"pass@2 of one task with 3/5 passes = {pass_at_k(5, 3, 2):.2f}")
    print(
        f"pass^2 of one task with 3/5 passes = {pass_hat_k(5, 3, 2):.2f}"
        "  (the plug-in would say 0.36)"
    )
    for metric in METRICS:
        est = estimate(tasks, 5, metric)
        assert est.value is not None
        assert est.ci_95 is not None
        label = metric.replace("k", "5")
        print(f"{label} = {est.value:.0%} [{est.ci_95[0]:.0%}, {est.ci_95[1]:.0%}]")
    print(estimate(tasks, 10).unknown_reason)
    counts = {f"deploy service {i}": (5, c) for i, c in enumerate(passes)}
    for row in lottery_cases(counts, 5, limit=3):
        print(f"lottery case: {row.task!r} ({row.c}/{row.n} runs)")
    return 0


def _embedded_options(parser: argparse.ArgumentParser, *, data_dir_help: str) -> None:
    parser.add_argument("--data-dir", type=Path, help=data_dir_help)
    parser.add_argument(
        "--servers",
        choices=["auto", "system", "package"],
        default="auto",
        help="embedded servers from the system, from Python packages, or the system's "
        "when usable (auto)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reliabilityd",
        description="Live pass@k / pass^k reliability numbers for agent trials.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("example", help="print the seed document's worked example")
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
    chk = sub.add_parser("check", help="exit 0 when this instance's heartbeat is fresh")
    chk.add_argument("-c", "--config", required=True, help="TOML config file")
    _add_query_commands(sub)
    _add_emit_import(sub)
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _add_query_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def where(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("-c", "--config", help="TOML config file (Redis URL, prefix, rules)")
        p.add_argument("--redis", help="Redis URL, when there is no config file")
        p.add_argument("--prefix", help="key prefix (default: the config's, else rel)")
        return p

    st = where(sub.add_parser("status", help="every suite's numbers, CIs and alert states"))
    st.add_argument("suite", nargs="?", help="one suite (default: all)")
    st.add_argument("--json", action="store_true", help="the snapshot JSON instead of a table")
    st.add_argument(
        "--k",
        type=_positive,
        action="append",
        default=[],
        help="compute this k now from the stored histogram (repeatable)",
    )
    cs = where(sub.add_parser("cases", help="a suite's lottery cases"))
    cs.add_argument("suite")
    cs.add_argument("--k", type=_positive, default=None, help="default: the largest configured k")
    cs.add_argument("--top", type=_positive, default=10)
    tk = where(sub.add_parser("tasks", help="a suite's per-task n and c"))
    tk.add_argument("suite")
    rs = where(sub.add_parser("reset", help="delete everything stored for a suite"))
    rs.add_argument("suite")
    rs.add_argument("--yes", action="store_true", help="do not ask")
    fg = where(sub.add_parser("forget", help="take one task out of a suite's counts"))
    fg.add_argument("suite")
    fg.add_argument("task")
    fg.add_argument("--yes", action="store_true", help="do not ask")
    dl = where(
        sub.add_parser(
            "dedup-layout",
            help="show or move which dedup records the writers keep (see docs: rolling upgrades)",
        )
    )
    move = dl.add_mutually_exclusive_group()
    move.add_argument(
        "--sets",
        action="store_true",
        help="keep only the bucket sets (refused while an earlier version runs)",
    )
    move.add_argument(
        "--keys-and-sets",
        action="store_true",
        help="keep per-trial keys too, so that an earlier version can run again",
    )


def _query(args: argparse.Namespace) -> int:
    import asyncio

    from reliabilityd import config as config_mod
    from reliabilityd.cli import status
    from reliabilityd.client._client import AsyncClient
    from reliabilityd.errors import ConfigError

    cfg = config_mod.Config()
    if args.config:
        try:
            cfg = config_mod.load(args.config)
        except ConfigError as exc:
            print(f"reliabilityd: config error: {exc}", file=sys.stderr)
            return exc.exit_code
    url = args.redis or cfg.redis.url
    prefix = args.prefix or cfg.redis.prefix
    if args.command == "reset" and not status.confirm(
        f"Delete every count, dedup record, snapshot and alert state of suite {args.suite!r}?",
        args.yes,
    ):
        return 1
    if args.command == "forget" and not status.confirm(
        f"Take task {args.task!r} out of suite {args.suite!r}?", args.yes
    ):
        return 1

    async def run() -> int:
        async with AsyncClient(url, prefix=prefix, cluster=cfg.redis.cluster) as client:
            if args.command == "status":
                return await status.status(
                    client,
                    args.suite,
                    ks=args.k,
                    rules=cfg.rules(),
                    as_json=args.json,
                    n_boot=cfg.stats.n_boot,
                )
            if args.command == "cases":
                k = args.k if args.k is not None else max(cfg.stats.k)
                return await status.cases(client, args.suite, k, args.top)
            if args.command == "tasks":
                return await status.tasks(client, args.suite)
            if args.command == "dedup-layout":
                return await _dedup_layout(client.store, args, cfg.dedup_ttl)
            if args.command == "reset":
                deleted = await client.reset(args.suite)
                print(f"reset {args.suite!r}: {deleted} keys deleted")
                return 0
            if await client.forget(args.suite, args.task):
                print(f"forgot task {args.task!r} of {args.suite!r}")
                return 0
            print(f"reliabilityd: suite {args.suite!r} has no task {args.task!r}", file=sys.stderr)
            return 1

    import redis.exceptions

    try:
        return asyncio.run(run())
    except redis.exceptions.RedisError as exc:
        print(f"reliabilityd: Redis at {url} answered: {exc}", file=sys.stderr)
        return 1


async def _dedup_layout(store: Store, args: argparse.Namespace, ttl: int) -> int:
    from datetime import datetime

    from reliabilityd.store import dedup

    def show(layout: dedup.DedupLayout) -> None:
        print(f"dedup layout: {layout.layout}, buckets of {layout.width} s")
        if layout.code(time.time()) == "x":
            until = datetime.fromtimestamp(layout.keys_until, UTC)
            print(
                f"per-trial records of earlier writes are honoured until {until:%Y-%m-%d %H:%M} UTC"
            )

    try:
        if not (args.sets or args.keys_and_sets):
            layout = await dedup.stored(store.client, store.keys)
            if layout is None:
                print("no dedup layout stored yet: the first writer stores one")
            else:
                show(layout)
            return 0
        to: dedup.Layout = dedup.SETS if args.sets else dedup.KEYS_AND_SETS
        layout, blockers = await dedup.move(store.client, store.keys, to, ttl)
    except dedup.DedupLayoutError as exc:
        print(f"reliabilityd: {exc}", file=sys.stderr)
        return 1
    if blockers:
        print(
            "reliabilityd: not moved: these instances run a version that keeps per-trial "
            f"records only and would count again what the sets record: {', '.join(blockers)}",
            file=sys.stderr,
        )
        return 1
    show(layout)
    if to == dedup.KEYS_AND_SETS:
        print(
            f"an earlier version may start once every writer has re-read the layout "
            f"({dedup.REFRESH:.0f} s) and the longest dedup TTL has passed: until then "
            "it cannot see what the sets alone recorded"
        )
    return 0


def _add_emit_import(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from reliabilityd.importers._import import FORMATS, WIRE

    emit = sub.add_parser("emit", help="publish one trial outcome (QoS 1) and wait for its PUBACK")
    emit.add_argument("suite")
    emit.add_argument("task")
    emit.add_argument("outcome", choices=["pass", "fail", "error", "skip"])
    emit.add_argument("--trial", help="trial id, unique per (suite, task); default: a new UUID")
    where = emit.add_mutually_exclusive_group()
    where.add_argument("--mqtt", help="broker URL (default $RELIABILITYD_MQTT_URL or localhost)")
    where.add_argument("-c", "--config", help="take the broker URL and topic from this config")
    emit.add_argument("--topic", help="topic to publish on (default reliability/trials/emit)")
    emit.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the PUBACK")
    imp = sub.add_parser(
        "import",
        help="import tau-bench, tau2-bench, Inspect AI or multivon-eval results, "
        "or trial events in the wire format (JSON lines or a JSON array)",
    )
    imp.add_argument("file")
    imp.add_argument("--suite", help="suite name (default: the one the file gives, else its name)")
    imp.add_argument(
        "--format", choices=(*FORMATS, WIRE), help="default: detected from the content"
    )
    imp.add_argument(
        "--run",
        help="run id carried by every trial id (default: from the content); "
        "wire events keep their trial ids, and the run only names the ledger's note",
    )
    imp.add_argument("--scorer", help="Inspect AI logs: the scorer to import (default: the first)")
    imp.add_argument("--json", action="store_true", help="print the result as JSON")
    where = imp.add_mutually_exclusive_group()
    where.add_argument("-c", "--config", help="TOML config: Redis, key prefix, windows, dedup TTL")
    where.add_argument("--redis", help="Redis URL (default $RELIABILITYD_REDIS_URL or localhost)")


def _load_config(path: str | None) -> object:
    """The config from ``path``, or the defaults; a ConfigError is returned, not raised."""
    from reliabilityd import config as config_mod
    from reliabilityd.errors import ConfigError

    try:
        return config_mod.load(path) if path else config_mod.Config()
    except ConfigError as exc:
        return exc


def _emit(args: argparse.Namespace) -> int:
    import os

    from reliabilityd.client.emitter import DEFAULT_TOPIC, Emitter, EmitterError
    from reliabilityd.config import Config
    from reliabilityd.errors import ConfigError

    cfg = _load_config(args.config)
    if isinstance(cfg, ConfigError):
        print(f"reliabilityd: config error: {cfg}", file=sys.stderr)
        return cfg.exit_code
    assert isinstance(cfg, Config)
    if args.config:
        url = cfg.mqtt.url
        topic = args.topic or cfg.mqtt.topic
        if not args.topic and topic.endswith("/#"):
            topic = topic[:-1] + "emit"  # a topic the daemon's subscription covers
        if "+" in topic or "#" in topic:
            print(f"reliabilityd: emit: cannot publish to {topic!r}; give --topic", file=sys.stderr)
            return 2
    else:
        url = args.mqtt or os.environ.get("RELIABILITYD_MQTT_URL") or cfg.mqtt.url
        topic = args.topic or DEFAULT_TOPIC
    try:
        with Emitter(url, topic=topic, connect_timeout=args.timeout) as emitter:
            trial = emitter.emit(args.suite, args.task, args.outcome, trial=args.trial)
            emitter.flush(args.timeout)
    except (EmitterError, ValueError) as exc:
        print(f"reliabilityd: emit: {exc}", file=sys.stderr)
        return 1
    print(trial)
    return 0


def _import(args: argparse.Namespace) -> int:
    import asyncio
    import os
    from pathlib import Path

    import msgspec
    from redis.exceptions import RedisError

    from reliabilityd.config import Config
    from reliabilityd.errors import ConfigError
    from reliabilityd.importers._import import ImportFileError, describe, import_file
    from reliabilityd.store._store import Store, connect

    cfg = _load_config(args.config)
    if isinstance(cfg, ConfigError):
        print(f"reliabilityd: config error: {cfg}", file=sys.stderr)
        return cfg.exit_code
    assert isinstance(cfg, Config)
    url = (
        cfg.redis.url
        if args.config
        else (args.redis or os.environ.get("RELIABILITYD_REDIS_URL") or cfg.redis.url)
    )

    async def go() -> int:
        client = connect(url, cluster=cfg.redis.cluster, timeout=cfg.redis.timeout)
        try:
            report = await import_file(
                Store(client, cfg.redis.prefix),
                Path(args.file),
                suite=args.suite,
                fmt=args.format,
                run=args.run,
                scorer=args.scorer,
                window=lambda suite: cfg.suite_settings(suite)[0],
                dedup_ttl=cfg.dedup_ttl,
            )
        finally:
            await client.aclose()
        if args.json:
            print(msgspec.json.encode(report).decode())
        else:
            print(describe(report))
        # Wire events the decoder refused: the rest counted, but say so.
        return 1 if report.rejected else 0

    try:
        return asyncio.run(go())
    except ImportFileError as exc:
        print(f"reliabilityd: import: {exc}", file=sys.stderr)
        return exc.exit_code
    except (OSError, RedisError) as exc:
        print(f"reliabilityd: import: cannot reach Redis at {url}: {exc}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("status", "cases", "tasks", "reset", "forget", "dedup-layout"):
        return _query(args)
    if args.command == "example":
        return _seed_example()
    if args.command == "demo":
        from reliabilityd.embedded import demo

        return demo.main(
            duration=args.duration,
            no_live=args.no_live,
            mode=args.servers,
            data_dir=args.data_dir,
        )
    if args.command == "run" and args.embedded:
        from reliabilityd import config as config_mod
        from reliabilityd.embedded import _servers as embedded
        from reliabilityd.errors import ConfigError

        try:
            cfg = config_mod.load(args.config) if args.config else config_mod.Config()
        except ConfigError as exc:
            print(f"reliabilityd: config error: {exc}", file=sys.stderr)
            return exc.exit_code
        return embedded.run(
            cfg,
            datadir=args.data_dir or embedded.default_datadir(),
            mode=args.servers,
            log_level=args.log_level,
        )
    if args.command in ("run", "check"):
        if not args.config:
            print("reliabilityd: -c/--config is required (or run --embedded)", file=sys.stderr)
            return 2
        import asyncio

        from reliabilityd import config as config_mod
        from reliabilityd import logs
        from reliabilityd.daemon import _daemon as daemon
        from reliabilityd.errors import ConfigError

        try:
            cfg = config_mod.load(args.config)
        except ConfigError as exc:
            print(f"reliabilityd: config error: {exc}", file=sys.stderr)
            return exc.exit_code
        if args.command == "check":
            return asyncio.run(daemon.check(cfg))
        logs.setup(args.log_level)
        return asyncio.run(daemon.main(cfg))
    if args.command == "emit":
        return _emit(args)
    if args.command == "import":
        return _import(args)
    raise AssertionError(args.command)  # argparse enforces the choices


if __name__ == "__main__":
    sys.exit(main())
