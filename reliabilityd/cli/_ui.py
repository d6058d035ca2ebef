"""``reliabilityd ui [SUITE]`` and ``reliabilityd endpoints``: where the deployment is.

``ui`` prints the web UI's address: the ``-c`` config's ``external_url`` or
HTTP port, else the running embedded daemon's (``reliabilityd.locate``),
else there is none to name, exit 1. ``endpoints`` prints the Redis, the
broker and the HTTP address every other command would use, each with how it
was found; ``endpoints redis|mqtt|http`` prints that one URL alone, for a
shell (``mosquitto_pub -L "$(reliabilityd endpoints mqtt)/reliability/trials/x"``).
Credentials in a URL are masked in both, as in every message.
"""

from __future__ import annotations

import argparse
from urllib.parse import quote

from reliabilityd import locate
from reliabilityd.cli._common import (
    add_redis_options,
    load_config,
    mqtt_target,
    redis_target,
    say,
)
from reliabilityd.logs import redact

__all__ = ["add_parsers", "ui_url"]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ui", help="print the web UI's address (a suite's page with SUITE)")
    p.add_argument("suite", nargs="?", help="the suite whose page to name")
    p.add_argument("-c", "--config", help="TOML config file ([http] port, external_url)")
    p.add_argument("--open", action="store_true", help="also open it in the default browser")
    p.set_defaults(handler=_ui)
    ep = add_redis_options(
        sub.add_parser(
            "endpoints",
            help="print the Redis, MQTT broker and HTTP address the commands use, and how each "
            "was found",
        )
    )
    ep.add_argument(
        "which", nargs="?", choices=("redis", "mqtt", "http"), help="print only this URL"
    )
    ep.add_argument("--mqtt", help="broker URL (as for emit)")
    ep.set_defaults(handler=_endpoints)


def ui_url(config_path: str | None) -> locate.Located | None:
    """The base URL of the pages and how it was found, or None when nothing serves them."""
    from reliabilityd.alerting.notify import base_url

    base = base_url(load_config(config_path)) if config_path else None
    return locate.http(base, config=config_path)


def _no_http(config_path: str | None) -> str:
    """Why there is no HTTP address to name: where it looked."""
    config = (
        f"{config_path} sets no [http] port or external_url"
        if config_path
        else "no -c config with an [http] port or external_url"
    )
    return f"no running embedded daemon in {locate.default_datadir()}, and {config}"


def _ui(args: argparse.Namespace) -> int:
    found = ui_url(args.config)
    if found is None:
        say(f"no web UI found: {_no_http(args.config)}")
        return 1
    base = found.url
    url = f"{base}/suites/{quote(args.suite, safe='')}" if args.suite else f"{base}/"
    print(redact(url))
    if args.open:
        import webbrowser

        webbrowser.open(url)
    return 0


def _endpoints(args: argparse.Namespace) -> int:
    target = redis_target(args)
    redis, mqtt = target.where, mqtt_target(args)
    http = ui_url(args.config)
    if args.which is not None:
        one = {"redis": redis, "mqtt": mqtt, "http": http}[args.which]
        if one is None:
            say(f"no HTTP address found: {_no_http(args.config)}")
            return 1
        print(redact(one.url))
        return 0
    print(f"redis  {target.describe()}")
    print(f"mqtt   {mqtt}")
    print(f"http   {http}" if http is not None else f"http   none: {_no_http(args.config)}")
    return 0
