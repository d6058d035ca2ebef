"""Who a request comes from, and how often a client may try a token on the token form.

``client_address``: the connection's peer, unless that peer is one of
``http.trusted_proxies`` (a reverse proxy in front of the daemon); then the
address that proxy was given in ``X-Forwarded-For``, read from the right,
skipping the trusted proxies in the chain. A client can write anything at
the left of that header, so only what a trusted proxy appended is believed;
with no trusted proxies the header is ignored.

``Throttle``: a token bucket per client address. Each wrong token takes one
token from its client's bucket; an empty bucket answers every try, right or
wrong, 429 with Retry-After, so a guess gets no answer while it is empty.
IPv6 clients are counted by their /64 (one host is handed a whole /64).
The buckets are bounded: past ``MAX_CLIENTS`` clients the one seen least
recently is forgotten first.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from aiohttp import web

from reliabilityd.config import parse_networks

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Wrong tokens a client may send at once, and how fast it may send more.
BURST = 10
PER_SECOND = 0.5
# Clients remembered at most.
MAX_CLIENTS = 10_000


def _address(text: str | None) -> Address | None:
    if not text:
        return None
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


class Peers:
    """The client address of a request, through ``trusted`` reverse proxies."""

    def __init__(self, trusted: Iterable[str]) -> None:
        self.trusted = parse_networks(trusted)

    def _is_trusted(self, address: Address | None) -> bool:
        return address is not None and any(address in net for net in self.trusted)

    def client_address(self, request: web.Request) -> str:
        """The address the request comes from ("unknown" when the transport has none)."""
        peer = request.remote or "unknown"
        if not self.trusted or not self._is_trusted(_address(peer)):
            return peer
        hops = [h.strip() for h in request.headers.getall("X-Forwarded-For", [])]
        chain = [part.strip() for hop in hops for part in hop.split(",")]
        for hop in reversed(chain):
            address = _address(hop)
            if address is None:
                return peer  # a hop that is no address: believe only the connection
            if not self._is_trusted(address):
                return str(address)
        return peer


@dataclass
class _Bucket:
    tokens: float
    at: float


def _client_key(address: str) -> str:
    parsed = _address(address)
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is None:
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed.ipv4_mapped) if isinstance(parsed, ipaddress.IPv6Address) else address


class Throttle:
    """A token bucket per client: ``burst`` tries, refilled at ``rate`` per second."""

    def __init__(
        self,
        burst: int = BURST,
        rate: float = PER_SECOND,
        *,
        most: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.rate = rate
        self.most = most
        self.clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def _bucket(self, client: str) -> _Bucket:
        key = _client_key(client)
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
            while len(self._buckets) > self.most:
                self._buckets.popitem(last=False)
        else:
            bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
        self._buckets.move_to_end(key)
        return bucket

    def retry_after(self, client: str) -> int:
        """0 when ``client`` may try now, else the whole seconds until it may."""
        bucket = self._bucket(client)
        if bucket.tokens >= 1.0:
            return 0
        return max(1, math.ceil((1.0 - bucket.tokens) / self.rate))

    def failed(self, client: str) -> None:
        """One wrong try by ``client``."""
        bucket = self._bucket(client)
        bucket.tokens = max(0.0, bucket.tokens - 1.0)
