"""``http.trusted_proxies``: addresses or CIDR networks, each checked, with the field in
every error."""

from __future__ import annotations

from pathlib import Path

import pytest

from reliabilityd import config
from reliabilityd.errors import ConfigError


def _load(tmp_path: Path, entries: str) -> config.Config:
    path = tmp_path / "c.toml"
    path.write_text(f"[http]\ntrusted_proxies = [{entries}]\n")
    return config.load(path)


def test_addresses_and_networks_of_both_families_are_trusted_proxies(tmp_path: Path) -> None:
    cfg = _load(tmp_path, '"10.0.0.5", "10.1.0.0/16", "fd00::/8", "::1"')
    assert cfg.http.trusted_proxies == ["10.0.0.5", "10.1.0.0/16", "fd00::/8", "::1"]
    assert [str(n) for n in config.parse_networks(cfg.http.trusted_proxies)] == [
        "10.0.0.5/32",
        "10.1.0.0/16",
        "fd00::/8",
        "::1/128",
    ]
    assert config.Config().http.trusted_proxies == []


@pytest.mark.parametrize("entry", ["proxy.internal", "10.0.0.300", "10.0.0.0/33", "fd00::/129"])
def test_a_trusted_proxy_that_is_no_address_names_its_entry(tmp_path: Path, entry: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _load(tmp_path, f'"10.0.0.1", "{entry}"')
    assert raised.value.field == "$.http.trusted_proxies[1]"
    assert f"{entry!r} is not an IP address or a network (CIDR)" in str(raised.value)


def test_trusted_proxies_are_bounded_in_length_and_count(tmp_path: Path) -> None:
    field = r"\$\.http\.trusted_proxies"
    with pytest.raises(ConfigError, match=rf"{field}\[0\]: Expected `str` of length >= 1"):
        _load(tmp_path, '""')
    with pytest.raises(ConfigError, match=rf"{field}\[0\]: Expected `str` of length <= 64"):
        _load(tmp_path, '"' + "1" * 65 + '"')
    with pytest.raises(ConfigError, match=rf"{field}: Expected `array` of length <= 256"):
        _load(tmp_path, ", ".join(f'"10.0.{i // 250}.{i % 250}"' for i in range(257)))
