"""Hypothesis strategies for names: Unicode categories, lengths and separators."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.internal.charmap import CategoryName

CATEGORIES: tuple[CategoryName, ...] = (
    "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
    "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Co", "Cn",
)  # fmt: skip
SEPARATORS = " /+#{}:.$-_\t\u00a0\u200b\u2028\ufeff\ufffe\uffff\ufdd0\U0010ffff"
pieces = st.sampled_from(CATEGORIES).flatmap(
    lambda category: st.text(st.characters(categories=[category]), min_size=1, max_size=8)
)


def _run_of(category: CategoryName, shortest: int, longest: int) -> st.SearchStrategy[str]:
    return st.text(st.characters(categories=[category]), min_size=shortest, max_size=longest)


# Around the 200-byte limit: mostly one-byte letters, and letters of two to four bytes.
near_limit = _run_of("Ll", 190, 210) | _run_of("Lo", 60, 110) | _run_of("So", 45, 60)
names = (
    st.lists(
        pieces | st.sampled_from(SEPARATORS) | st.text(st.sampled_from(SEPARATORS), max_size=3),
        min_size=1,
        max_size=12,
    ).map("".join)
    | st.text(min_size=1, max_size=80)
    | near_limit
)
