"""The ``reliabilityd`` command line: run, check, demo, bench, emit, import."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _seed_example() -> int:
    """Print the seed document's worked example from the library."""
    from reliabilityd import estimate, lottery_cases, pass_at_k, pass_hat_k
    from reliabilityd.estimators import METRICS

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reliabilityd",
        description="Live pass@k / pass^k reliability numbers for agent trials.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("example", help="print the seed document's worked example")
    demo = sub.add_parser(
        "demo", help="private redis-server and mosquitto, the daemon, events in, numbers out"
    )
    demo.add_argument(
        "--serve", action="store_true", help="keep the servers and the daemon running until Ctrl-C"
    )
    run = sub.add_parser("run", help="run the daemon")
    run.add_argument("-c", "--config", required=True, help="TOML config file")
    run.add_argument("--log-level", default="INFO")
    chk = sub.add_parser("check", help="exit 0 when this instance's heartbeat is fresh")
    chk.add_argument("-c", "--config", required=True, help="TOML config file")
    bench = sub.add_parser("bench", help="benchmarks that print their figure beside a baseline")
    bench.add_argument("what", choices=["stats", "ingest", "import"])
    _add_emit_import(sub)
    return parser


def _add_emit_import(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from reliabilityd.importers import FORMATS

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
        "import", help="import tau-bench, tau2-bench, Inspect AI or multivon-eval results"
    )
    imp.add_argument("file")
    imp.add_argument("--suite", help="suite name (default: the one the file gives, else its name)")
    imp.add_argument("--format", choices=FORMATS, help="default: detected from the content")
    imp.add_argument("--run", help="run id carried by every trial id (default: from the content)")
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

    from reliabilityd.config import Config
    from reliabilityd.emitter import DEFAULT_TOPIC, Emitter, EmitterError
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
    from reliabilityd.importers import ImportFileError, describe, import_file
    from reliabilityd.store import Store, connect

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
        return 0

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
    if args.command == "example":
        return _seed_example()
    if args.command == "demo":
        from reliabilityd import demo

        return demo.main(serve=args.serve)
    if args.command in ("run", "check"):
        import asyncio

        from reliabilityd import config as config_mod
        from reliabilityd import daemon, logs
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
    if args.command == "bench":
        if args.what == "stats":
            from reliabilityd import bench_stats

            bench_stats.main()
        elif args.what == "import":
            from reliabilityd import bench_import

            bench_import.main()
        else:
            from reliabilityd import bench_ingest

            bench_ingest.main()
        return 0
    if args.command == "emit":
        return _emit(args)
    if args.command == "import":
        return _import(args)
    raise AssertionError(args.command)  # argparse enforces the choices


if __name__ == "__main__":
    sys.exit(main())
