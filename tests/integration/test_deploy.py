"""deploy/: what can be checked without building images or pulling them.

The files parse (YAML, JSON, TOML through the daemon's own loader, the
systemd unit as INI; promtool and amtool check theirs), they name the right
commands, ports and hosts, and every metric a dashboard panel or a rule
queries is one a live daemon really exports.
"""

from __future__ import annotations

import configparser
import contextlib
import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import pytest
import yaml

from reliabilityd import config as config_mod
from reliabilityd.config import Config, HttpConfig, IngestConfig, RedisConfig
from reliabilityd.daemon._http_server import ACCEPT_PIPELINE, BACKLOG, FD_RESERVE
from reliabilityd.embedded.processes import binary
from reliabilityd.errors import ConfigError
from reliabilityd.rules import Rule
from tests.support.daemon import store_for
from tests.support.helpers import stored_state, wait_until
from tests.support.http import event, http_config, post, scrape, serving
from tests.support.servers import RedisServer

CONFIG_PATH = "/etc/reliabilityd/config.toml"
METRIC = re.compile(r"\breliabilityd_[a-z0-9_]+\b")
TOKEN_ENV = {"RELIABILITYD_HTTP_TOKEN": "t"}

# The deploy files users copy, at the repository root.
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def load_yaml(relative: str) -> Any:
    return yaml.safe_load((DEPLOY / relative).read_text())


def container_config() -> Config:
    return config_mod.load(DEPLOY / "reliabilityd.toml", environ=TOKEN_ENV)


def k8s_docs() -> dict[str, Any]:
    docs = yaml.safe_load_all((DEPLOY / "kubernetes" / "reliabilityd.yaml").read_text())
    return {d["kind"]: d for d in docs}


def test_the_container_config_loads_and_needs_a_token() -> None:
    cfg = container_config()
    assert cfg.http.port == 9780
    assert cfg.mqtt.shared_group
    with pytest.raises(ConfigError) as err:
        config_mod.load(DEPLOY / "reliabilityd.toml", environ={})
    assert err.value.field == "$.http.token"


def test_the_kubernetes_config_map_holds_a_valid_config(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(k8s_docs()["ConfigMap"]["data"]["config.toml"])
    cfg = config_mod.load(path, environ=TOKEN_ENV)
    assert cfg.http.port == 9780
    assert cfg.mqtt.shared_group


def test_dockerfile_runs_the_daemon_on_its_config_and_exposes_its_port() -> None:
    lines = (DEPLOY / "Dockerfile").read_text().splitlines()
    instr: dict[str, list[str]] = {}
    for line in lines:
        if line and not line.startswith((" ", "#")):
            word, _, rest = line.partition(" ")
            instr.setdefault(word, []).append(rest)
    entry = json.loads(instr["ENTRYPOINT"][0]) + json.loads(instr["CMD"][0])
    assert entry == ["reliabilityd", "run", "-c", CONFIG_PATH]
    assert f"deploy/reliabilityd.toml {CONFIG_PATH}" in instr["COPY"]
    assert instr["EXPOSE"] == [str(container_config().http.port)]
    assert "/healthz" in "\n".join(lines)


def test_compose_has_two_replicas_on_one_shared_subscription() -> None:
    compose = load_yaml("compose.yaml")
    services = compose["services"]
    assert {"redis", "mosquitto", "prometheus", "alertmanager"} <= set(services)
    replicas = {name: s for name, s in services.items() if name.startswith("reliabilityd")}
    assert len(replicas) == 2
    cfg = container_config()
    ids = set()
    for svc in replicas.values():
        assert svc["build"]["dockerfile"] == "deploy/Dockerfile"
        assert svc["command"] == ["run", "-c", CONFIG_PATH]
        assert f"./reliabilityd.toml:{CONFIG_PATH}:ro" in svc["volumes"]
        env = svc["environment"]
        assert env["RELIABILITYD_MQTT_CLIENT_ID"] == env["RELIABILITYD_INSTANCE"]
        ids.add(env["RELIABILITYD_MQTT_CLIENT_ID"])
        assert "RELIABILITYD_HTTP_TOKEN" in env
        (port,) = svc["ports"]
        assert port.endswith(f":{cfg.http.port}")
    assert len(ids) == 2, "each replica needs its own broker session"
    # The config's hosts are the compose services.
    assert urlsplit(cfg.redis.url).hostname == "redis"
    assert config_mod.parse_mqtt_url(cfg.mqtt.url).host == "mosquitto"
    assert urlsplit(cfg.sinks.alertmanager.url).hostname == "alertmanager"
    # Redis and mosquitto run with the shipped settings.
    assert "./redis.conf:/usr/local/etc/redis/redis.conf:ro" in services["redis"]["volumes"]
    mosq = services["mosquitto"]
    assert "./mosquitto.conf:/mosquitto/config/mosquitto.conf:ro" in mosq["volumes"]
    persistence = next(
        line.split()[1]
        for line in (DEPLOY / "mosquitto.conf").read_text().splitlines()
        if line.startswith("persistence_location")
    )
    assert f"chown mosquitto:mosquitto {persistence.rstrip('/')}" in mosq["command"][-1]
    # Prometheus scrapes both replicas on their HTTP port and loads the example rules.
    prom = load_yaml("prometheus/prometheus.yml")
    (job,) = prom["scrape_configs"]
    targets = job["static_configs"][0]["targets"]
    assert sorted(targets) == sorted(f"{name}:{cfg.http.port}" for name in replicas)
    mounted = [v.split(":")[1] for v in services["prometheus"]["volumes"]]
    assert prom["rule_files"] == ["/etc/prometheus/rules.yml"]
    assert "/etc/prometheus/rules.yml" in mounted


def test_kubernetes_liveness_is_the_process_and_readiness_is_check() -> None:
    docs = k8s_docs()
    pod = docs["StatefulSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["reliabilityd", "run", "-c", CONFIG_PATH]
    (port,) = container["ports"]
    assert port["containerPort"] == 9780
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    readiness = container["readinessProbe"]["exec"]["command"]
    assert readiness == ["reliabilityd", "check", "-c", CONFIG_PATH]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["RELIABILITYD_MQTT_CLIENT_ID"]["value"] == "$(POD_NAME)"
    assert env["RELIABILITYD_INSTANCE"]["value"] == "$(POD_NAME)"
    assert "secretKeyRef" in env["RELIABILITYD_HTTP_TOKEN"]["valueFrom"]
    assert docs["Service"]["spec"]["ports"][0]["targetPort"] == port["name"]
    assert docs["StatefulSet"]["spec"]["replicas"] == 2


def test_systemd_unit_runs_the_daemon_stops_it_with_sigterm_and_reloads_with_sighup() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(DEPLOY / "reliabilityd.service")
    service = unit["Service"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0].endswith("/reliabilityd")
    assert argv[1:] == ["run", "-c", CONFIG_PATH]
    assert service["KillSignal"] == "SIGTERM"
    assert shlex.split(service["ExecReload"]) == ["/bin/kill", "-HUP", "$MAINPID"]
    assert service["RestartPreventExitStatus"] == "2"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_the_unit_file_limit_leaves_room_for_the_http_connections() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(DEPLOY / "reliabilityd.service")
    http, pool = HttpConfig(), RedisConfig().max_connections
    needed = (
        http.max_connections + http.max_inflight + pool + FD_RESERVE + ACCEPT_PIPELINE * BACKLOG
    )
    assert int(unit["Service"]["LimitNOFILE"]) >= 10 * needed


def test_mosquitto_message_size_limit_is_a_memory_guard_above_the_daemon_limit() -> None:
    lines = (DEPLOY / "mosquitto.conf").read_text().splitlines()
    limits = [int(line.split()[1]) for line in lines if line.startswith("message_size_limit ")]
    assert len(limits) == 1, limits
    assert limits[0] >= 8 * IngestConfig().max_payload
    at = next(i for i, line in enumerate(lines) if line.startswith("message_size_limit "))
    comment = " ".join(lines[at - 4 : at])
    assert "without a trace" in comment
    assert "dead-letters" in comment


def test_promtool_and_amtool_accept_the_files(tmp_path: Path) -> None:
    rules = DEPLOY / "prometheus" / "rules.yml"
    subprocess.run([binary("promtool"), "check", "rules", str(rules)], check=True)
    prom = load_yaml("prometheus/prometheus.yml")
    prom["rule_files"] = [str(rules)]
    local = tmp_path / "prometheus.yml"
    local.write_text(yaml.safe_dump(prom))
    subprocess.run([binary("promtool"), "check", "config", str(local)], check=True)
    am = DEPLOY / "alertmanager" / "alertmanager.yml"
    subprocess.run([binary("amtool"), "check-config", str(am)], check=True)


def queried_metrics() -> dict[str, set[str]]:
    """Every reliabilityd_* name in the rules' and the dashboard's queries."""
    rules = load_yaml("prometheus/rules.yml")
    exprs = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"]}
    dashboard = json.loads((DEPLOY / "grafana" / "reliabilityd-dashboard.json").read_text())
    for p in dashboard["panels"]:
        for t in p["targets"]:
            exprs[f"panel {p['title']!r} {t['refId']}"] = t["expr"]
    for var in dashboard["templating"]["list"]:
        if "definition" in var:
            exprs[f"variable {var['name']}"] = var["definition"]
    return {where: set(METRIC.findall(expr)) for where, expr in exprs.items()}


async def test_every_queried_metric_is_exported_by_a_live_daemon(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix, ks=[1, 5])
    cfg = msgspec.structs.replace(cfg, alerts=[Rule(name="r", k=5, below=0.5, trigger="ci-low")])
    batch = [
        event(f"t{i}", str(j), "pass" if j % 2 else "fail") for i in range(3) for j in range(5)
    ]
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        assert (await post(base, [*batch, batch[0]]))[0] == 200

        async def alert_judged() -> bool:
            state = await stored_state(store, "web", "r")
            return state.seq > 0

        await wait_until(alert_judged)
        queried = queried_metrics()
        wanted = set().union(*queried.values())
        exported: set[str] = set()

        async def all_exported() -> bool:
            # The series' summary row follows the verdict by one write: wait for it.
            nonlocal exported
            exported = {name for name, _ in await scrape(base)}
            return wanted <= exported

        with contextlib.suppress(TimeoutError):  # the assertion below names what is missing
            await wait_until(all_exported, 20)
    assert sum(len(names) for names in queried.values()) > 20
    missing = {where: names - exported for where, names in queried.items() if names - exported}
    assert not missing, f"queries name metrics the daemon does not export: {missing}"
