"""A change detector for pass^k against a rule's threshold, from the committed windows.

Why: a rule on the window's CI lower bound cannot tell a suite at 0.85 from
one at 0.75 (the bound is +-0.08 wide at 50 tasks), so it pages many times a
day for nothing, and ``for`` barely helps because a dip lasts about as long
as the window. The bound's width is mostly the spread *between* tasks, which
is fixed for a fixed task set; what moves when a suite regresses is each
task's own failure rate. This detector watches exactly that.

How: every task's window (its last W outcomes, as committed in Redis) is
split into its most recent m outcomes and the older ones, the baseline. Two
hypotheses about the recent outcomes, both anchored to the rule's
threshold ``below``:

* the baseline's own per-task pass rates, and
* the same rates shifted by one common log-odds step ``delta`` until the
  suite's pass^k has moved by exactly ``below - baseline pass^k`` (the
  baseline pass^k is the exact unbiased window estimator; the shift only
  shapes how a drop spreads over the tasks).

When the baseline is above the threshold the first is the null and the
shifted one (at the threshold) the alternative; when it is below, the other
way round. The evidence is the log-likelihood ratio (in nats) of the recent
outcomes, alternative over null, maximised over m = 1..``recent`` (a
window-limited CUSUM: the change may have started at any of the last m
rounds) and floored at 0. A rule with ``trigger = "detector"`` breaches when
it reaches ``evidence`` nats (or when the CI's *upper* bound is under
``below``: then the whole window says so).

That CUSUM compares the recent outcomes with the window's older ones, so a
slow drift, which moves the baseline with it, never builds much evidence,
and a small suite has too few tasks to build it within ``recent`` rounds.
``level`` is the second statistic, against a reference that does not move:
the generalised likelihood ratio of each task's whole window for "pass^k is
where the window puts it" over "pass^k is at ``below``", with one common
log-odds shift of the (shrunk) per-task rates as the only free parameter on
both sides. One free parameter whatever the number of tasks: under the
boundary ``2 * level`` is about chi-square with one degree of freedom (half
of it at 0), so a level threshold means the same at 10 tasks as at 200.

Nothing here keeps state between ticks: the evidence is a function of the
committed windows alone, so replicas that judge the same version agree, and
a restart loses nothing. Per-task rates are shrunk away from 0 and 1
(``(c + 1/2) / (n + 1)``) only inside the likelihood; no reported number
uses them, and the plug-in ``(c/n)^k`` is never reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import msgspec
import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

DEFAULT_RECENT = 5
_SHIFT_BOUND = 30.0
_BISECT = 32
PRIOR = 4.0


class RecentCounts(msgspec.Struct, frozen=True):
    """What the detector reads from one suite's windows.

    ``n[t]`` outcomes in task t's window, ``c[t]`` of them passed, and
    ``recent[t, m - 1]`` passes among its last m outcomes (m = 1..M). Leading
    batch axes are allowed (the simulation judges many rounds at once).
    """

    n: IntArray
    c: IntArray
    recent: IntArray


def recent_counts(windows: Sequence[str], recent: int = DEFAULT_RECENT) -> RecentCounts:
    """Parse the tasks' windows as stored in Redis: oldest first, ``1`` = pass, ``0`` = fail.

    This is the daemon's entry point: the strings come from the tasks hash
    (``n:c:<outcomes>``), the part after the second colon.
    """
    if recent < 1:
        raise ValueError(f"recent must be at least 1, got {recent}")
    n: list[int] = []
    c: list[int] = []
    tail: list[list[int]] = []
    for w in windows:
        if w.strip("01"):
            raise ValueError(f"a window holds only 0 and 1, got {w!r}")
        n.append(len(w))
        c.append(w.count("1"))
        last = w[::-1][:recent]
        run = list(accumulate(ch == "1" for ch in last))
        # A window shorter than `recent` stops counting where it ends.
        tail.append(run + [run[-1] if run else 0] * (recent - len(run)))
    return RecentCounts(
        n=np.asarray(n, dtype=np.int64).reshape(len(n)),
        c=np.asarray(c, dtype=np.int64).reshape(len(c)),
        recent=np.asarray(tail, dtype=np.int64).reshape(len(tail), recent),
    )


def _sigmoid(x: FloatArray) -> FloatArray:
    out: FloatArray = 1.0 / (1.0 + np.exp(-x))
    return out


def _unbiased_pass_hat(n: IntArray, c: IntArray, k: int) -> FloatArray:
    """C(c, k) / C(n, k) elementwise (0 where c < k); n >= k wherever it is used."""
    out = np.ones(np.broadcast(n, c).shape, dtype=np.float64)
    nf = n.astype(np.float64)
    cf = c.astype(np.float64)
    for i in range(k):
        out *= np.clip(cf - i, 0.0, None) / np.maximum(nf - i, 1.0)
    return out


def _split_evidence(
    n: IntArray, c: IntArray, m: int, passes: IntArray, *, k: int, below: float
) -> FloatArray:
    """Log-likelihood ratio of each task's last m outcomes, alternative over null."""
    nb = n - m
    cb = c - passes
    used = nb >= k
    w = used.astype(np.float64)
    tasks = w.sum(axis=-1)
    safe = np.maximum(tasks, 1.0)
    base = (_unbiased_pass_hat(np.where(used, nb, k), np.where(used, cb, 0), k) * w).sum(
        axis=-1
    ) / safe
    p = _shrunk(nb, cb, used)
    lp = np.log(p) - np.log1p(-p)
    plug = ((p**k) * w).sum(axis=-1) / safe
    # Only the shape of a drop comes from the shrunk rates; its size is the
    # unbiased estimator's distance to the threshold.
    goal = np.clip(plug + (below - base), 1e-12, 1.0 - 1e-12)
    shifted = _sigmoid(lp - _shift_to(lp, goal, w, k)[..., None])
    drop = (below - base)[..., None] < 0.0  # baseline above the threshold
    first = np.where(drop, shifted, p)
    second = np.where(drop, p, shifted)
    # The alternative is the drop: its rates are the lower ones. Taking the
    # minimum keeps that exact where the bisection lands a hair off (a baseline
    # at the threshold), so a run of passes is never evidence of a drop.
    alt = np.clip(np.minimum(first, second), 1e-12, 1.0 - 1e-12)
    null = np.clip(np.maximum(first, second), 1e-12, 1.0 - 1e-12)
    per_fail = np.log1p(-alt) - np.log1p(-null)
    per_pass = np.log(alt) - np.log(null)
    llr: FloatArray = (((m - passes) * per_fail + passes * per_pass) * w).sum(axis=-1)
    return np.where(tasks > 0, llr, 0.0)


def _shrunk(n: IntArray, c: IntArray, used: BoolArray) -> FloatArray:
    """Per-task rates, each shrunk toward the suite's pooled rate by PRIOR pseudo-trials.

    A task that has not failed yet is not taken as perfect.
    """
    w = used.astype(np.float64)
    nf = np.maximum(n, 0).astype(np.float64) * w
    pooled = ((c * w).sum(axis=-1) + 0.5) / (nf.sum(axis=-1) + 1.0)
    out: FloatArray = (c + PRIOR * pooled[..., None]) / (np.maximum(n, 0) + PRIOR)
    return out


def _shape(n: IntArray, c: IntArray, used: BoolArray) -> FloatArray:
    """Per-task log-odds of the shrunk rates."""
    p = _shrunk(n, c, used)
    out: FloatArray = np.log(p) - np.log1p(-p)
    return out


def _shift_to(lp: FloatArray, goal: FloatArray, w: FloatArray, k: int) -> FloatArray:
    """The common log-odds shift that puts the mean of sigmoid(lp - shift)^k at ``goal``."""
    safe = np.maximum(w.sum(axis=-1), 1.0)
    lo = np.full(goal.shape, -_SHIFT_BOUND)
    hi = np.full(goal.shape, _SHIFT_BOUND)
    for _ in range(_BISECT):
        mid = (lo + hi) / 2.0
        level = ((_sigmoid(lp - mid[..., None]) ** k) * w).sum(axis=-1) / safe
        too_high = level > goal
        lo = np.where(too_high, mid, lo)
        hi = np.where(too_high, hi, mid)
    out: FloatArray = (lo + hi) / 2.0
    return out


def _loglik(lp: FloatArray, shift: FloatArray, n: FloatArray, c: FloatArray) -> FloatArray:
    x = lp - shift[..., None]
    # log sigmoid(x) and log(1 - sigmoid(x)), stable for large |x|.
    log_p = -np.logaddexp(0.0, -x)
    log_q = -np.logaddexp(0.0, x)
    out: FloatArray = (c * log_p + (n - c) * log_q).sum(axis=-1)
    return out


def level(counts: RecentCounts, k: int, below: float) -> FloatArray:
    """Nats of evidence, from the whole windows, that the suite's pass^k is under ``below``.

    The generalised likelihood ratio of every task's window for the best
    common log-odds shift of the shrunk per-task rates over the shift that
    puts pass^k at ``below`` (the unbiased window estimate's distance to
    ``below``, as in ``evidence``); 0 when the window is at or above
    ``below``. Tasks with fewer than k outcomes are left out. Shape: the
    batch shape of ``counts``.
    """
    n, c = counts.n, counts.c
    if c.ndim == 1 and c.size > 1:
        # One suite: a canonical task order first, so that float sums (and the
        # Newton steps built on them) give bit-identical levels whatever order
        # a replica listed the tasks in.
        order = np.lexsort((c, n))
        n, c = n[order], c[order]
    used = n >= k
    w = used.astype(np.float64)
    tasks = w.sum(axis=-1)
    safe = np.maximum(tasks, 1.0)
    base = (_unbiased_pass_hat(np.where(used, n, k), np.where(used, c, 0), k) * w).sum(
        axis=-1
    ) / safe
    lp = _shape(n, c, used)
    plug = ((_sigmoid(lp) ** k) * w).sum(axis=-1) / safe
    goal = np.clip(plug + (below - base), 1e-12, 1.0 - 1e-12)
    null = _shift_to(lp, goal, w, k)
    nf = np.where(used, n, 0).astype(np.float64)
    cf = np.where(used, c, 0).astype(np.float64)
    # The best shift: Newton's method on a concave log-likelihood, from 0.
    best = np.zeros(goal.shape)
    for _ in range(8):
        pr = _sigmoid(lp - best[..., None])
        grad = (nf * pr - cf).sum(axis=-1)
        curv = (nf * pr * (1.0 - pr)).sum(axis=-1)
        best = np.clip(best + grad / np.maximum(curv, 1e-9), -_SHIFT_BOUND, _SHIFT_BOUND)
    gain = _loglik(lp, best, nf, cf) - _loglik(lp, null, nf, cf)
    under = (base < below) & (tasks > 0)
    out: FloatArray = np.where(under, np.maximum(gain, 0.0), 0.0)
    return out


def evidence(counts: RecentCounts, k: int, below: float) -> FloatArray:
    """Nats of evidence that the suite's pass^k has moved to ``below`` or under it, now.

    Shape: the batch shape of ``counts`` (a 0-d array for one suite). For each
    split m, tasks with fewer than m + k outcomes (no baseline) are left out.
    """
    if counts.c.ndim == 1 and counts.c.size > 1:
        # One suite: put its tasks in a canonical order first, so that float
        # sums (and the bisection built on them) give bit-identical evidence
        # whatever order a replica listed the tasks in.
        order = np.lexsort((*counts.recent.T[::-1], counts.c, counts.n))
        counts = RecentCounts(n=counts.n[order], c=counts.c[order], recent=counts.recent[order])
    best = np.zeros(counts.c.shape[:-1])
    for m in range(1, counts.recent.shape[-1] + 1):
        llr = _split_evidence(counts.n, counts.c, m, counts.recent[..., m - 1], k=k, below=below)
        best = np.maximum(best, llr)
    return best
