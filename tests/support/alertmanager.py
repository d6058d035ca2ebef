"""A small HTTP server standing in for Alertmanager's receiving end (and a webhook).

It checks every POST /api/v2/alerts body against what Alertmanager's API
accepts (postableAlerts: a JSON array of objects with string label and
annotation maps, `alertname` among the labels, RFC 3339 times, a URI
generatorURL) and answers 400 otherwise, as Alertmanager would.
"""

from __future__ import annotations

import json
import re
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def alertmanager_problems(body: Any) -> list[str]:
    problems = []
    if not isinstance(body, list):
        return ["body is not a JSON array"]
    for i, alert in enumerate(body):
        if not isinstance(alert, dict):
            problems.append(f"[{i}] is not an object")
            continue
        unknown = set(alert) - {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}
        if unknown:
            problems.append(f"[{i}] unknown fields {sorted(unknown)}")
        labels = alert.get("labels")
        if not isinstance(labels, dict) or not labels.get("alertname"):
            problems.append(f"[{i}].labels must be an object with alertname")
        else:
            for name, value in labels.items():
                if not LABEL_NAME.match(name) or not isinstance(value, str):
                    problems.append(f"[{i}].labels.{name} is not a valid label")
        annotations = alert.get("annotations", {})
        if not isinstance(annotations, dict) or not all(
            isinstance(v, str) for v in annotations.values()
        ):
            problems.append(f"[{i}].annotations must map names to strings")
        for field in ("startsAt", "endsAt"):
            if field in alert:
                try:
                    datetime.fromisoformat(alert[field])
                except (TypeError, ValueError):
                    problems.append(f"[{i}].{field} is not RFC 3339")
        if "generatorURL" in alert:
            parts = urlsplit(alert["generatorURL"])
            if not (parts.scheme and parts.netloc):
                problems.append(f"[{i}].generatorURL is not a URI")
    return problems


class Receiver:
    """Records accepted POSTs; `failing = True` makes it answer 503."""

    def __init__(self) -> None:
        self.alerts: list[dict[str, Any]] = []
        self.webhook: list[dict[str, Any]] = []
        self.rejected: list[str] = []
        self.failing = False
        self.attempts = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                receiver.attempts += 1
                if receiver.failing:
                    self.send_response(503)
                    self.end_headers()
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    receiver.rejected.append("not JSON")
                    self.send_response(400)
                    self.end_headers()
                    return
                if self.path == "/api/v2/alerts":
                    problems = alertmanager_problems(body)
                    if problems or self.headers.get("Content-Type") != "application/json":
                        receiver.rejected.extend(problems or ["Content-Type"])
                        self.send_response(400)
                        self.end_headers()
                        return
                    receiver.alerts.extend(body)
                elif self.path == "/hook":
                    receiver.webhook.append(body)
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
