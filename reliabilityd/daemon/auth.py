"""Who may write and read which suites over HTTP: bearer tokens and their suite globs.

``Authority.from_config(http, grants)`` knows every token: ``http.token``
may write and read every suite; each ``[[http.tokens]]`` entry writes the
suites of the ``[[grants]]`` entry it names and reads those its ``read``
globs match, else its grant's (globs as in ``[[suites]] match``: ``*``,
``?``, ``[...]``, case-sensitive). A token is compared with every
configured one in constant time, and its value is never kept anywhere but
here, nor logged: an ``Access`` is named by where the token was configured
(``http.token``, ``http.tokens[0]`` or its variable's name), and carries
the name of its grant, under which the dead letters it sends are filed
when they name no suite it may write.

Without any token, anyone may write (``run`` then refuses to listen beyond
loopback). On loopback, anyone may read; beyond it, reads need a token
whose ``read`` globs match the suite, and a read of every suite at once
(``/metrics``) needs one that may read every suite (``http.token``, or
``read = ["*"]``), unless ``http.metrics_open``.

The handlers ask ``authority.grant(request)`` once per request and then the
access per suite (``access.may("write", suite)``, or ``access.refused_writes``
for a request's events, each refused one a rejection of class
``forbidden``, answered and counted but never dead-lettered); ``allows`` and
``readable`` do both steps for a caller that needs one answer, such as an
HTML page listing the suites its reader may see.
"""

from __future__ import annotations

import fnmatch
import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

import msgspec

from reliabilityd.config import GrantConfig, HttpConfig, is_loopback
from reliabilityd.events import TrialEvent, named_suite
from reliabilityd.rejections import Rejected

Action = Literal["read", "write"]
EVERY = ("*",)


class _HasHeaders(Protocol):
    @property
    def headers(self) -> Mapping[str, str]: ...


# A request (its ``Authorization: Bearer`` header), the token itself, or None.
Credential = _HasHeaders | str | None


@dataclass(frozen=True)
class Access:
    """What one caller may do: the suite globs it may write and read.

    ``anonymous`` is the access of a caller that sent no valid token;
    ``grant`` the ``[[grants]]`` entry its token writes for, if any.
    """

    name: str
    write: tuple[str, ...]
    read: tuple[str, ...]
    anonymous: bool = False
    grant: str | None = None

    def filed(self, rejected: Sequence[Rejected]) -> list[Rejected]:
        """``rejected`` as this caller's dead letters: each marked with its grant, and
        each that names a suite this caller may not write filed under no suite, so
        one tenant's bad input never lands on another's page or counts."""
        if self.grant is None and self.may_all("write"):
            return list(rejected)
        out = []
        for r in rejected:
            named = r.suite if r.suite is not None else named_suite(r.raw)
            suite = named if named and self.may("write", named) else ""
            out.append(msgspec.structs.replace(r, suite=suite, grant=self.grant))
        return out

    def may(self, action: Action, suite: str) -> bool:
        """True when this grant lets its holder ``action`` ("read" or "write") ``suite``."""
        globs = self.write if action == "write" else self.read
        return any(g == "*" or fnmatch.fnmatchcase(suite, g) for g in globs)

    def may_all(self, action: Action) -> bool:
        """True when this grant covers every suite for ``action`` (a ``*`` glob)."""
        return "*" in (self.write if action == "write" else self.read)

    def refused_writes(self, outcomes: Sequence[TrialEvent | Rejected]) -> dict[int, Rejected]:
        """Index -> rejection (class ``forbidden``) of each event of ``outcomes`` whose suite
        this grant may not write; the pieces already rejected are left as they are."""
        if self.may_all("write"):
            return {}
        refused: dict[str, Rejected] = {}  # one rejection per suite, however many events
        out: dict[int, Rejected] = {}
        for i, e in enumerate(outcomes):
            if isinstance(e, TrialEvent) and not self.may("write", e.suite):
                rejection = refused.get(e.suite)
                if rejection is None:
                    reason = f"forbidden: this token may not write suite {e.suite!r}"
                    rejection = refused[e.suite] = Rejected(b"", reason, "forbidden", e.suite)
                out[i] = rejection
        return out

    def filter(self, action: Action, suites: Iterable[str]) -> list[str]:
        """The suites of ``suites`` this grant lets its holder ``action``, in order."""
        if self.may_all(action):
            return list(suites)
        return [s for s in suites if self.may(action, s)]


class Authority:
    """Every configured token and what it grants; see the module docstring."""

    def __init__(self, grants: Iterable[tuple[str, Access]], *, open_reads: bool) -> None:
        # Reads open to anyone are open to every token holder too.
        self._grants = [
            (token.encode(), replace(grant, read=EVERY) if open_reads else grant)
            for token, grant in grants
        ]
        writes = EVERY if not self._grants else ()
        self.anonymous = Access("anonymous", writes, EVERY if open_reads else (), anonymous=True)

    @classmethod
    def from_config(cls, config: HttpConfig, grants: Sequence[GrantConfig] = ()) -> Authority:
        """The tokens of ``[http]``: ``token`` (every suite) and ``[[http.tokens]]``,
        each writing the suites of the ``grants`` entry it names.

        ``config.load`` has read each ``token_env`` into ``token`` and checked
        that every grant a token names exists.
        """
        suites = {g.name: tuple(g.suites) for g in grants}
        out: list[tuple[str, Access]] = []
        if config.token:
            out.append((config.token, Access("http.token", EVERY, EVERY)))
        for i, entry in enumerate(config.tokens):
            name = entry.token_env or f"http.tokens[{i}]"
            write = suites.get(entry.grant, ()) if entry.grant else ()
            read = write if entry.read is None else tuple(entry.read)
            out.append((entry.token, Access(name, write, read, grant=entry.grant or None)))
        return cls(out, open_reads=is_loopback(config.host))

    def configure(self, config: HttpConfig, grants: Sequence[GrantConfig] = ()) -> None:
        """Every token of ``config`` from now on, in place of the ones before (a reload).

        The handlers and pages hold this one Authority: a request answered
        after the swap is judged by the new tokens only, one before it by the
        old ones only.
        """
        fresh = Authority.from_config(config, grants)
        self._grants, self.anonymous = fresh._grants, fresh.anonymous

    @property
    def tokens_required(self) -> bool:
        """True when writes need a token (any token is configured)."""
        return bool(self._grants)

    def grant(self, credential: Credential) -> Access:
        """The grant of a request's bearer token (or of the token given), else ``anonymous``.

        Every configured token is compared, each in constant time, whichever
        matches: the time taken tells nothing of which one, or how much of it.
        """
        token = _bearer(credential)
        if token is None:
            return self.anonymous
        given = token.encode()
        found: Access | None = None
        for expected, grant in self._grants:
            if hmac.compare_digest(given, expected) and found is None:
                found = grant
        return found or self.anonymous

    def allows(self, credential: Credential, action: Action, suite: str) -> bool:
        """True when ``credential`` may ``action`` ("read" or "write") ``suite``."""
        return self.grant(credential).may(action, suite)

    def readable(self, credential: Credential, suites: Iterable[str]) -> list[str]:
        """The suites of ``suites`` that ``credential`` may read, in order (an index page's)."""
        return self.grant(credential).filter("read", suites)


def _bearer(credential: Credential) -> str | None:
    if credential is None or isinstance(credential, str):
        return credential or None
    scheme, _, given = credential.headers.get("Authorization", "").partition(" ")
    given = given.strip()
    return given if scheme.lower() == "bearer" and given else None
