"""What a rejection is: the input refused, the reason in words, and its reason class.

The class is one of a small fixed set (``REASON_CLASSES``), the ``reason``
label of ``reliabilityd_rejected_total`` and the ``class`` of a dead letter.
Each rejection is made with its class by the step that refuses the input:
the decoder (``events``), the topic binding (``topics``), the admission of
the commit (``sources``), the write scopes of the HTTP port
(``daemon.auth``), the OTLP mapping (``integrations.otlp``). Nothing reads
a class back out of the words, so rewording a reason (or a msgspec release
rewording its own messages) moves no metric label.
"""

from __future__ import annotations

from typing import Literal, get_args

import msgspec

ReasonClass = Literal[
    "too_large",  # larger than ingest.max_payload
    "empty",  # an empty payload or an empty array
    "undecodable",  # not JSON or MessagePack: plain text, malformed, nested too deep
    "not_an_event",  # it decodes, but to no object
    "missing_field",  # an object without a field a trial needs
    "invalid_field",  # a field of the wrong type or value, a label that names no slice
    "topic_mismatch",  # mqtt.bind_suite: the topic names another suite, or none
    "forbidden",  # the HTTP token may not write the suite (counted, not dead-lettered)
    "too_many_suites",  # a new suite past stats.max_suites
    "other",
]
# The classes in the order the metric lists them.
REASON_CLASSES: tuple[ReasonClass, ...] = get_args(ReasonClass)


class Rejected(msgspec.Struct, frozen=True):
    """An element (or a whole payload) that did not decode, validate or pass admission.

    ``reason_class`` is set where the rejection is made. ``suite`` is the
    suite it is filed under: set where the bytes do not name the right one
    (an OTLP record, whose suite its resource names; "" for input whose
    sender may not write the suite it names), else None, and the dead
    letter's suite is the one ``raw`` names, if any (``events.named_suite``).
    ``grant`` is the ``[[grants]]`` entry of the sender's token, when it
    has one: a letter that names no suite is filed under it.
    """

    raw: bytes
    reason: str
    reason_class: ReasonClass
    suite: str | None = None
    grant: str | None = None
