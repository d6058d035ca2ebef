"""Verbs that put trials in: ``emit`` (one outcome over MQTT) and ``import`` (result files)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from reliabilityd.cli._common import (
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    add_redis_options,
    load_config,
    mqtt_target,
    redis_target,
    say,
)
from reliabilityd.locate import unreachable

if TYPE_CHECKING:
    from reliabilityd.importers import ImportReport

__all__ = ["add_parsers"]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from reliabilityd.importers._import import FORMATS, WIRE

    emit = sub.add_parser("emit", help="publish one trial outcome (QoS 1) and wait for its PUBACK")
    emit.add_argument("suite")
    emit.add_argument("task")
    emit.add_argument("outcome", choices=["pass", "fail", "error", "skip"])
    emit.add_argument("--trial", help="trial id, unique per (suite, task); default: a new UUID")
    emit.add_argument(
        "--mqtt",
        help="broker URL (default: $RELIABILITYD_MQTT_URL, the config's, a running embedded "
        "daemon's, else mqtt://127.0.0.1:1883)",
    )
    emit.add_argument("--url", help="where to read the trial (http(s) URL, or a relative path)")
    emit.add_argument("--run", help="the run, eval or experiment the trial belongs to")
    emit.add_argument("-c", "--config", help="take the broker URL and topic from this config")
    emit.add_argument(
        "--topic",
        help="topic to publish on (default reliability/trials/emit); {suite} in it is the suite",
    )
    emit.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the PUBACK")
    emit.set_defaults(handler=_emit)
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
    add_redis_options(imp)  # the config also gives the windows and the dedup TTL
    imp.set_defaults(handler=_import)


def _emit(args: argparse.Namespace) -> int:
    from reliabilityd.client._errors import EmitterError
    from reliabilityd.client.emitter import DEFAULT_TOPIC, Emitter
    from reliabilityd.topics import emitter_topic

    cfg = load_config(args.config)
    where = mqtt_target(args)
    if args.config:
        # A topic the daemon's subscription covers (per suite with mqtt.bind_suite).
        found = args.topic or emitter_topic(cfg.mqtt.topic, cfg.mqtt.bind_suite)
        if found is None or "+" in found or "#" in found:
            say(f"emit: cannot publish under {cfg.mqtt.topic!r}; give --topic")
            return EXIT_USAGE
        topic = found
    else:
        topic = args.topic or DEFAULT_TOPIC
    try:
        with Emitter(where, topic=topic, connect_timeout=args.timeout) as emitter:
            trial = emitter.emit(
                args.suite,
                args.task,
                args.outcome,
                trial=args.trial,
                url=args.url,
                run=args.run,
            )
            emitter.flush(args.timeout)
    except EmitterError as exc:
        say(f"emit: {exc}")
        return EXIT_UNREACHABLE
    except (ValueError, TypeError) as exc:  # the event as given would be rejected
        say(f"emit: {exc}")
        return EXIT_USAGE
    print(trial)
    return 0


def _import(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    import msgspec

    from reliabilityd.importers import ImportFileError, describe, import_file
    from reliabilityd.store import Store, StoreError, StoreUnavailable, connect

    target = redis_target(args)
    cfg, url = target.config, target.url

    async def go() -> ImportReport:
        client = connect(url, cluster=cfg.redis.cluster, timeout=cfg.redis.timeout)
        try:
            return await import_file(
                Store(client, target.prefix),
                Path(args.file),
                suite=args.suite,
                fmt=args.format,
                run=args.run,
                scorer=args.scorer,
                window=lambda suite: cfg.suite_settings(suite)[0],
                dedup_ttl=cfg.dedup_ttl,
                config=cfg,
            )
        finally:
            await client.aclose()

    try:
        report = asyncio.run(go())
    except ImportFileError as exc:
        say(f"import: {exc}")
        return exc.exit_code
    except BrokenPipeError:
        raise  # standard output, not Redis: the entry point ends quietly
    except StoreUnavailable as exc:
        say(f"import: {unreachable('Redis', target.describe(), exc)}")
        return EXIT_UNREACHABLE
    except StoreError as exc:
        say(f"import: Redis at {target.describe()} answered: {exc}")
        return EXIT_UNREACHABLE
    print(msgspec.json.encode(report).decode() if args.json else describe(report))
    # Wire events the decoder refused: the rest counted, but say so.
    return 1 if report.rejected else 0
