"""Commit times at whole microseconds: every commit time names one microsecond, and that
microsecond, printed or typed back, names its delta.

Commit times are epoch seconds in a double (offsets compare them with `>=`). A reader
sees them to the microsecond: the CLI prints them with six decimals, a Spark TIMESTAMP
holds microseconds, and `AS OF '<time>'` is typed back from either. A time read from the
system clock has digits below the microsecond (0.1234567 s), so its printed value
(0.123457) could fall either side of it, and a printed time rounded down named the
delta before. So the clock hands out whole microseconds (`next_commit_ts`): the double
nearest to n / 10**6, which prints as n, casts to Spark's TIMESTAMP n and parses back to
the same double. Up to 2**33 s (the year 2242) doubles are closer together than a
microsecond, so distinct microseconds are distinct doubles and keep their order.

Times stored before this rule have digits below the microsecond, so readers compare at
microsecond resolution (`microsecond_end`): a time selects the commits whose microsecond
(the nearest, as printed) is at or before its own.
"""

from __future__ import annotations

import math
from fractions import Fraction

MICROS = 10**6


def microsecond_of(ts: float) -> int:
    """The microsecond epoch time `ts` names: the nearest one (ties to even), as
    `datetime.fromtimestamp` prints it. Exact arithmetic: `ts * 1e6` in doubles is off by
    up to an eighth of a microsecond at today's times."""
    return round(Fraction(ts) * MICROS)


def next_commit_ts(now: float, last: float) -> float:
    """The commit clock's next value: the whole microsecond of `now`, or the microsecond
    after `last`'s when `now` is not later (a clock that went back, or two commits in one
    microsecond): strictly greater than `last`, also when `last` has digits below the
    microsecond (a clock value stored before this rule)."""
    return max(microsecond_of(now), microsecond_of(last) + 1) / MICROS


def microsecond_end(us: int) -> float:
    """The smallest double above every time whose microsecond is `us` or earlier:
    `commit_ts < microsecond_end(us)` holds exactly for the commit times named at or
    before microsecond `us` (the half microsecond after it is the border; a time exactly
    on it is named by the even one of the two, as `microsecond_of` rounds)."""
    half_after = Fraction(2 * us + 1, 2 * MICROS)
    bound = float(half_after)
    if Fraction(bound) < half_after or (Fraction(bound) == half_after and us % 2 == 0):
        bound = math.nextafter(bound, math.inf)
    return bound
