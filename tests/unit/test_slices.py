"""Slice ids: canonical, escaped, parsed back; label filters; the config keys that slice."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from reliabilityd.config import load
from reliabilityd.errors import ConfigError
from reliabilityd.names import NAME_FORBIDDEN
from reliabilityd.stats.compare import Side
from reliabilityd.stats.slices import (
    Ids,
    escape,
    label_text,
    matches,
    parse_filter,
    parse_id,
    shown,
    slice_id,
    unescape,
)
from reliabilityd.store.keys import Keys, Series

texts = st.text(min_size=0, max_size=40).filter(lambda t: not NAME_FORBIDDEN.search(t))
# What an id escapes, written out here (not imported): the id's own syntax (% , =),
# what a hash tag, a key or an MQTT topic gives a meaning to ({ } / + # :), a Redis
# glob's (* ? [ ] \) and the space a Prometheus label or a log line splits on.
ESCAPED = "%,=/+#{}:*?[]\\ "


def each_escaped(test: Callable[..., None], example_of: Callable[[str], Any]) -> Any:
    """``test`` with one explicit example per escaped character: every run tries each,
    whatever the search draws."""
    for ch in ESCAPED:
        test = example(example_of(ch))(test)
    return test


@partial(each_escaped, example_of=lambda ch: [(f"k{ch}", f"v{ch}"), (ch, ch + ch)])
@given(
    st.lists(st.tuples(texts.filter(bool), texts), min_size=1, max_size=4, unique_by=lambda x: x[0])
)
def test_an_id_parses_back_to_its_labels_and_is_safe_in_keys_and_topics(
    pairs: list[tuple[str, str]],
) -> None:
    keys = [k for k, _ in pairs]
    labels = dict(pairs)
    sid = slice_id(keys, labels)
    assert parse_id(sid) == labels
    assert list(parse_id(sid)) == keys  # slice_by order
    for bad in "{}/+#:*?[]\\ ":
        assert bad not in sid
    key = Keys("rel").series(Series("s", sid), "tasks")
    assert key.startswith("rel:{s}:slice:")
    assert key.index("}") == len("rel:{s")  # the hash tag is the suite's


@partial(each_escaped, example_of=lambda ch: f"a{ch}b{ch}%41")
@given(texts)
def test_escape_round_trips(text: str) -> None:
    assert unescape(escape(text)) == text
    # Escaped, nothing is left that an id, a key, a topic or a glob reads.
    assert not set(escape(text)) & set(ESCAPED.replace("%", ""))


def test_label_values_become_text_or_a_reason() -> None:
    assert slice_id(["model", "v"], {"model": "gpt-5", "v": 1.5}) == "model=gpt-5,v=1.5"
    assert slice_id(["model", "v"], {"model": "m", "v": None}) == "model=m,v="
    assert slice_id(["model", "v"], None) == "model=,v="
    assert slice_id(["b"], {"b": True}) == "b=true"
    assert slice_id(["n"], {"n": 3}) == "n=3"
    assert shown("model=m,v=") == "model=m,v=(none)"
    with pytest.raises(ValueError, match=r"labels\.m is dict"):
        label_text("m", {"x": 1})
    with pytest.raises(ValueError, match="longer than 200 bytes"):
        label_text("m", "x" * 201)
    with pytest.raises(ValueError, match="control or invisible"):
        label_text("m", "a\u200bb")
    with pytest.raises(ValueError, match="finite"):
        label_text("m", float("nan"))


def test_filters_select_the_slices_that_carry_every_value() -> None:
    assert parse_filter("agent_version=1.5, model=x") == {"agent_version": "1.5", "model": "x"}
    assert parse_filter("v=(none)") == {"v": ""}
    assert parse_filter("v=a%2Cb") == {"v": "a,b"}
    for bad in ("v", "=1", "v=1,v=2"):
        with pytest.raises(ValueError, match=r"key=value|named twice"):
            parse_filter(bad)
    sid = slice_id(["model", "v"], {"model": "x", "v": "a,b"})
    assert matches(sid, {"v": "a,b"})
    assert matches(sid, {})
    assert not matches(sid, {"v": "a"})
    assert not matches(sid, {"region": "eu"})
    assert Side.parse("s", "v=1.5") == Side("s", {"v": "1.5"})
    assert Side.parse("s").label == "s"
    assert Side("s", {"v": "", "a": "1"}).label == "s[a=1,v=(none)]"


def test_series_marks_name_the_suite_or_the_slice() -> None:
    assert Series("s").member == "s"
    assert Series("s", "m=x").member == "s/m=x"
    assert Series.of_member("s/m=x%2Fy") == Series("s", "m=x%2Fy")
    assert Series.of_member("s") == Series("s")


def test_slice_by_naming_a_label_twice_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[stats]\nslice_by = ["model", "model"]\n')
    with pytest.raises(ConfigError, match="names a label twice") as err:
        load(path)
    assert err.value.field == "$.stats.slice_by"
    path.write_text('[[suites]]\nmatch = "a"\nmax_slices = 0\n')
    with pytest.raises(ConfigError, match="max_slices"):
        load(path)
    path.write_text(
        '[stats]\nslice_by = ["model"]\nmax_suites = 5\n'
        '[[suites]]\nmatch = "a*"\nslice_by = []\nmax_slices = 7\n'
    )
    cfg = load(path)
    assert cfg.slicing("b") == (("model",), 50)
    assert cfg.slicing("ab") == ((), 7)
    assert cfg.stats.max_suites == 5


def test_ids_make_each_combination_once_and_tell_equal_values_of_other_types_apart() -> None:
    ids = Ids(["v"])
    assert ids({"v": 1}) == "v=1"
    assert ids({"v": 1.0}) == "v=1.0"
    assert ids({"v": True}) == "v=true"
    assert ids({"v": 1}) == "v=1"
    with pytest.raises(ValueError, match="is list"):
        ids({"v": [1]})
