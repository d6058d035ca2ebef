"""HTTP token scopes (daemon.auth): which token may write and read which suites."""

from __future__ import annotations

from pathlib import Path

import pytest

from reliabilityd.config import GrantConfig, HttpConfig, HttpToken, load
from reliabilityd.daemon.auth import Authority
from reliabilityd.errors import ConfigError


class _Request:
    def __init__(self, authorization: str | None) -> None:
        self.headers = {} if authorization is None else {"Authorization": authorization}


def _scoped(host: str = "0.0.0.0", token: str = "all-secret") -> Authority:
    return Authority.from_config(
        HttpConfig(
            host=host,
            port=1,
            token=token,
            tokens=[
                HttpToken(token="a-secret", grant="teamA", read=["teamA-*", "shared"]),
                HttpToken(token="reader", read=["*"]),
            ],
        ),
        [GrantConfig(name="teamA", suites=["teamA-*"])],
    )


def test_a_scoped_token_writes_and_reads_its_suites_only() -> None:
    auth = _scoped()
    assert auth.allows("a-secret", "write", "teamA-deploy")
    assert not auth.allows("a-secret", "write", "teamB-deploy")
    assert not auth.allows("a-secret", "write", "shared")
    assert auth.allows("a-secret", "read", "shared")
    assert not auth.allows("a-secret", "read", "teamB-deploy")
    assert auth.readable("a-secret", ["teamB-x", "teamA-x", "shared"]) == ["teamA-x", "shared"]
    assert not auth.grant("a-secret").may_all("read")


def test_the_all_suites_token_and_a_read_everything_token() -> None:
    auth = _scoped()
    assert auth.allows("all-secret", "write", "anything")
    assert auth.grant("all-secret").may_all("read")
    assert auth.grant("reader").may_all("read")
    assert not auth.allows("reader", "write", "teamA-x")


def test_requests_are_read_by_their_bearer_header() -> None:
    auth = _scoped()
    assert auth.allows(_Request("Bearer a-secret"), "write", "teamA-x")
    assert auth.allows(_Request("bearer  a-secret "), "write", "teamA-x")
    assert auth.grant(_Request("Basic a-secret")).anonymous
    assert auth.grant(_Request("Bearer a-secre")).anonymous
    assert auth.grant(_Request("Bearer a-secretX")).anonymous
    assert auth.grant(_Request(None)).anonymous
    assert auth.grant("").anonymous
    assert auth.grant(None).anonymous
    assert auth.grant(_Request("Bearer a-secret")).name == "http.tokens[0]"


def test_beyond_loopback_the_anonymous_caller_reads_and_writes_nothing() -> None:
    anonymous = _scoped().grant(None)
    assert not anonymous.may("read", "teamA-x")
    assert not anonymous.may("write", "teamA-x")
    assert _scoped().tokens_required


def test_on_loopback_reads_are_open_and_writes_still_need_a_token() -> None:
    auth = _scoped(host="127.0.0.1")
    assert auth.allows(None, "read", "teamB-x")
    assert auth.grant("wrong").may_all("read")
    assert not auth.allows(None, "write", "teamB-x")
    # A scoped token reads everything on loopback too: reads there are open.
    assert auth.allows("a-secret", "read", "teamB-x")


def test_without_any_token_writes_are_open() -> None:
    auth = Authority.from_config(HttpConfig(port=1))
    assert not auth.tokens_required
    assert auth.allows(None, "write", "x")
    assert auth.allows("anything", "read", "x")


def test_globs_are_case_sensitive_and_whole_name() -> None:
    auth = Authority.from_config(
        HttpConfig(tokens=[HttpToken(token="t", grant="g")]),
        [GrantConfig(name="g", suites=["team?-[ab]*", "exact"])],
    )
    assert auth.allows("t", "write", "team1-alpha")
    assert not auth.allows("t", "write", "team1-Alpha")
    assert not auth.allows("t", "write", "team12-alpha")
    assert auth.allows("t", "write", "exact")
    assert not auth.allows("t", "write", "exactly")
    assert not auth.allows("t", "write", "TEAM1-alpha")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_token_env_is_read_at_load(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '[[grants]]\nname = "teamA"\nsuites = ["teamA-*"]\n'
        '[http]\nport = 9\nhost = "0.0.0.0"\n[[http.tokens]]\ntoken_env = "TEAM_A"\n'
        'grant = "teamA"\n',
    )
    cfg = load(path, environ={"TEAM_A": "from-the-environment"})
    assert cfg.http.tokens[0].token == "from-the-environment"
    auth = Authority.from_config(cfg.http, cfg.grants)
    assert auth.allows("from-the-environment", "write", "teamA-x")
    assert auth.grant("from-the-environment").name == "TEAM_A"
    with pytest.raises(ConfigError) as info:
        load(path, environ={})
    assert info.value.field == "$.http.tokens[0].token_env"
    assert "TEAM_A is unset" in str(info.value)


@pytest.mark.parametrize(
    ("entries", "field", "words"),
    [
        ('[[http.tokens]]\nread = ["a"]\n', "$.http.tokens[0]", "one of `token` and `token_env`"),
        (
            '[[http.tokens]]\ntoken = "x"\ntoken_env = "X"\nread = ["a"]\n',
            "$.http.tokens[0]",
            "one of",
        ),
        ('[[http.tokens]]\ntoken = "x"\n', "$.http.tokens[0]", "grants nothing"),
        (
            '[[http.tokens]]\ntoken = "x"\nread = ["a"]\n'
            '[[http.tokens]]\ntoken = "x"\nread = ["a"]\n',
            "$.http.tokens[1]",
            "tokens must differ",
        ),
        ('[[http.tokens]]\ntoken = "main"\nread = ["a"]\n', "$.http.tokens[0]", "must differ"),
        ('[[http.tokens]]\ntoken = "x"\nread = [""]\n', "$.http.tokens[0].read[0]", "length"),
    ],
)
def test_bad_token_entries_name_the_field(
    tmp_path: Path, entries: str, field: str, words: str
) -> None:
    path = _write(tmp_path, f'[http]\ntoken = "main"\n{entries}')
    with pytest.raises(ConfigError) as info:
        load(path, environ={})
    assert info.value.field == field
    assert words in str(info.value)


def test_scoped_tokens_alone_allow_listening_beyond_loopback(tmp_path: Path) -> None:
    path = _write(tmp_path, '[http]\nport = 9\nhost = "0.0.0.0"\n')
    with pytest.raises(ConfigError) as info:
        load(path, environ={})
    assert info.value.field == "$.http.token"
    path = _write(
        tmp_path, '[http]\nport = 9\nhost = "0.0.0.0"\n[[http.tokens]]\ntoken = "x"\nread = ["*"]\n'
    )
    assert load(path, environ={}).http.tokens[0].read == ["*"]
