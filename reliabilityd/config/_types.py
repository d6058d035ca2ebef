"""What every configuration table shares: the strict base and the bounded value types."""

from __future__ import annotations

from typing import Annotated

import msgspec

PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
NonNegFloat = Annotated[float, msgspec.Meta(ge=0)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
Fraction01 = Annotated[float, msgspec.Meta(gt=0, le=1)]
# An address or CIDR network: `fd00::/8` is the longest kind, 43 characters at most.
ProxyEntry = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


class Base(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Config tables reject keys they do not know: a typo is an error, not a default."""
