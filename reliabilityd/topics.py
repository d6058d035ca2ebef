"""Suites bound to MQTT topics (``mqtt.bind_suite``): which suite a topic names.

Off by default: the payload alone names the suite, and any topic under the
subscription works. With a binding, every event's suite must be the suite
its message's topic names, or the event is dead-lettered (reason class
``topic_mismatch``) and never counted, so broker ACLs on topics confine a
producer to its suites. A binding is either

* ``"last-level"``: the topic's last level is the suite
  (``reliability/trials/deploy-bot`` carries only ``deploy-bot``), or
* a pattern with ``{suite}`` as one whole level and every other level
  literal or ``+`` (any one level): ``"tenants/+/trials/{suite}"``.

Suite names hold no ``/``, ``+`` or ``#`` (``events``), so a suite is always
exactly one topic level. The check is per element: in an array, each event
is held to its message's topic on its own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from reliabilityd.events import MAX_LETTERS, TrialEvent, decode_many
from reliabilityd.rejections import Rejected

LAST_LEVEL = "last-level"
SUITE = "{suite}"
# The source a message's dead letters carry is "mqtt:<topic>" (sources.mqtt).
_MQTT = "mqtt:"
_NO_LEVELS: tuple[str, ...] = ()


@dataclass(frozen=True)
class Binding:
    """A parsed ``mqtt.bind_suite``: ``levels`` is the pattern split at ``/``, empty for
    ``"last-level"``."""

    spec: str
    levels: tuple[str, ...] = _NO_LEVELS

    @classmethod
    def parse(cls, spec: str) -> Binding:
        """The binding ``spec`` describes; ValueError saying what is wrong with it."""
        if spec == LAST_LEVEL:
            return cls(spec)
        levels = tuple(spec.split("/"))
        if levels.count(SUITE) != 1:
            raise ValueError(
                f'must be "{LAST_LEVEL}" or a topic pattern with {SUITE} as one whole level, '
                f'e.g. "reliability/trials/{SUITE}"'
            )
        for level in levels:
            if level != SUITE and ("{" in level or "}" in level):
                raise ValueError(f"level {level!r}: only {SUITE} may be a placeholder")
            if "#" in level or ("+" in level and level != "+"):
                raise ValueError(f"level {level!r}: a level is literal, + or {SUITE} (no #)")
        return cls(spec, levels)

    def suite_of(self, topic: str) -> str | None:
        """The suite ``topic`` names, or None when the topic does not fit the pattern."""
        if not self.levels:
            return topic.rpartition("/")[2]
        levels = topic.split("/")
        if len(levels) != len(self.levels):
            return None
        suite: str | None = None
        for want, got in zip(self.levels, levels, strict=True):
            if want == SUITE:
                suite = got
            elif want not in ("+", got):
                return None
        return suite

    def topic_for(self, suite: str) -> str | None:
        """The topic that carries ``suite``, or None when the pattern has a ``+`` level
        (or is ``"last-level"``): then only the publisher knows the other levels."""
        if not self.levels or "+" in self.levels:
            return None
        return "/".join(suite if level == SUITE else level for level in self.levels)

    def uncovered(self, topic_filter: str) -> str | None:
        """Why the subscription ``topic_filter`` misses topics this binding accepts, or None.

        Binding narrows what counts; it never widens what arrives, so a
        subscription that cannot receive every suite's topic is a config error.
        """
        wanted = topic_filter.split("/")
        if not self.levels:
            if wanted[-1] in ("+", "#"):
                return None
            return f"ends in the literal level {wanted[-1]!r}: with {LAST_LEVEL}, end it in + or #"
        for i, level in enumerate(self.levels):
            if i >= len(wanted):
                return f"has fewer levels than mqtt.bind_suite {self.spec!r}"
            have = wanted[i]
            if have == "#":
                return None
            if have != "+" and (level in (SUITE, "+") or have != level):
                return f"level {i} is {have!r}: it must be + or # to take {level!r}"
        if len(wanted) > len(self.levels):
            return f"has more levels than mqtt.bind_suite {self.spec!r}"
        return None

    def refuse(self, topic: str, event: TrialEvent) -> Rejected:
        """The rejection (class ``topic_mismatch``) of an event ``topic`` does not bind."""
        suite = self.suite_of(topic)
        if suite is None:
            reason = f"topic {topic!r} names no suite under mqtt.bind_suite {self.spec!r}"
        else:
            reason = (
                f"topic {topic!r} binds suite {suite!r}, not {event.suite!r} "
                f"(mqtt.bind_suite {self.spec!r})"
            )
        # Filed under the suite its topic binds (the publisher's), not the one it names.
        return Rejected(msgspec.json.encode(event), reason, "topic_mismatch", suite or "")


def emitter_topic(topic_filter: str, bind_suite: str) -> str | None:
    """The topic an Emitter publishes on for a daemon subscribed to ``topic_filter``.

    Without a binding, a fixed topic under the filter (``.../#`` gives
    ``.../emit``); with one, a per-suite pattern holding ``{suite}``. None
    when the filter or pattern leaves a level only the publisher can name.
    """
    if not bind_suite:
        topic = topic_filter[:-1] + "emit" if topic_filter.endswith("/#") else topic_filter
    elif bind_suite == LAST_LEVEL:
        head, _, last = topic_filter.rpartition("/")
        topic = f"{head}/{SUITE}" if head and last in ("+", "#") else ""
    else:
        topic = bind_suite
    if not topic or "+" in topic or "#" in topic:
        return None
    return topic


def decode_bound(
    payloads: Sequence[tuple[bytes, str]], binding: Binding, max_payload: int = 1 << 20
) -> tuple[list[TrialEvent], list[tuple[Rejected, str]]]:
    """``events.decode_many``, then every event of an MQTT message (source
    ``mqtt:<topic>``) held to its topic; other sources name no topic to hold to.

    Messages are decoded in groups by topic: with a binding every suite has
    its own topic, so a suite's events keep their arrival order. Per topic
    and batch, the first ``MAX_LETTERS`` events that name another suite get
    a dead letter with the reason, and one more counts the rest.
    """
    groups: dict[str, list[tuple[bytes, str]]] = defaultdict(list)
    for payload, source in payloads:
        groups[source].append((payload, source))
    good: list[TrialEvent] = []
    bad: list[tuple[Rejected, str]] = []
    for source, group in groups.items():
        events, rejected = decode_many(group, max_payload)
        bad.extend(rejected)
        if not source.startswith(_MQTT):
            good.extend(events)
            continue
        topic = source.removeprefix(_MQTT)
        suite = binding.suite_of(topic)
        strays = [e for e in events if e.suite != suite]
        if not strays:
            good.extend(events)
            continue
        good.extend(e for e in events if e.suite == suite)
        bad.extend((binding.refuse(topic, event), source) for event in strays[:MAX_LETTERS])
        if len(strays) > MAX_LETTERS:
            rest = len(strays) - MAX_LETTERS
            reason = (
                f"topic {topic!r}: {rest} more events of another suite than it binds "
                f"(mqtt.bind_suite {binding.spec!r}; only the first {MAX_LETTERS} get their "
                "own dead letter)"
            )
            bad.append((Rejected(b"", reason, "topic_mismatch", suite or ""), source))
    return good, bad
