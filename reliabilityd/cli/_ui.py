"""``reliabilityd ui [SUITE]``: the address of the web UI, found the way the other verbs find Redis.

First match wins: the ``-c`` config's ``external_url`` or HTTP port; the
embedded daemon running on the default data directory (its
``endpoints.json`` records the HTTP port); else there is none to name, exit 1.
"""

from __future__ import annotations

import argparse
from urllib.parse import quote

from reliabilityd.cli._common import load_config, say

__all__ = ["add_parsers", "ui_url"]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ui", help="print the web UI's address (a suite's page with SUITE)")
    p.add_argument("suite", nargs="?", help="the suite whose page to name")
    p.add_argument("-c", "--config", help="TOML config file ([http] port, external_url)")
    p.add_argument("--open", action="store_true", help="also open it in the default browser")
    p.set_defaults(handler=_ui)


def ui_url(config_path: str | None) -> tuple[str, str] | None:
    """(base URL of the pages, how it was found), or None when nothing serves them."""
    from reliabilityd.alerting.notify import base_url
    from reliabilityd.embedded import _servers as embedded

    if config_path:
        base = base_url(load_config(config_path))
        if base is not None:
            return base, f"from {config_path}"
    datadir = embedded.default_datadir()
    ports = embedded.running_endpoints(datadir)
    if ports is not None and ports.http:
        return f"http://127.0.0.1:{ports.http}", f"the embedded daemon in {datadir}"
    return None


def _ui(args: argparse.Namespace) -> int:
    found = ui_url(args.config)
    if found is None:
        say(
            "no web UI found: no running embedded daemon in the default data directory, and no "
            "-c config with an [http] port or external_url"
        )
        return 1
    base, _ = found
    url = f"{base}/suites/{quote(args.suite, safe='')}" if args.suite else f"{base}/"
    print(url)
    if args.open:
        import webbrowser

        webbrowser.open(url)
    return 0
