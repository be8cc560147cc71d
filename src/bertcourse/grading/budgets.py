"""The time budgets of one notebook: one clock, charged to one budget at a time.

Running the notebook's cells (every start and restart of its worker) is charged to the notebook's
`time_limit_s`; each check to its part's `part_time_limit_s` (a part: the checks of one autograded
test cell); starting a process from the zygote to nobody. So a hang spends only its own part's time,
and a notebook costs at most time_limit_s + parts x part budget.
"""

from __future__ import annotations

import time

NOTEBOOK = "\0notebook"  # the budget of running the notebook's cells (parts are keyed by grade_id)


class TimeBudgets:
    """Seconds left per budget: the notebook's (`NOTEBOOK`) and each part's (its grade_id)."""

    def __init__(self, notebook_limit_s: float, part_limit_s: float):
        self.part_limit_s = part_limit_s  # what a part's budget starts with
        self.left_s: dict[str, float] = {NOTEBOOK: notebook_limit_s}
        self.clock: str | None = None  # the budget being charged now (None: nobody's)
        self.since = time.monotonic()  # when the clock last switched
        self.uncharged_s = 0.0  # seconds charged to no budget (process starts)

    def charge(self, budget: str | None) -> None:
        """Charge the time since the last switch to the current budget, then start charging `budget`."""
        now = time.monotonic()
        if self.clock is None:
            self.uncharged_s += now - self.since
        else:
            self.left_s[self.clock] = self.left(self.clock, now)
        self.clock, self.since = budget, now

    def left(self, budget: str, now: float | None = None) -> float:
        """Seconds `budget` has left (counting the running clock when it is being charged)."""
        left = self.left_s.get(budget, self.part_limit_s)
        return left - ((now or time.monotonic()) - self.since) if budget == self.clock else left

    def bound_s(self, parts: set[str]) -> float:
        """The most seconds the notebook and `parts` may still take, besides process starts."""
        return max(self.left(NOTEBOOK), 0) + sum(max(self.left(p), 0) for p in parts)
