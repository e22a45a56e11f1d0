"""Score saved or generated completions with the isolation training gives rewards: a deadline, errors counted.

Training wraps every reward in `rewards.to_trl`: a reward that raises, returns NaN, or runs past its
timeout is counted instead of ending or blocking the run, and a timeout the completion caused scores 0
(a wrong answer). Evaluation (`task.score`) and the report (each reward, rescored from saved
completions) call the same code outside the trainer, so they go through `Guarded`: the same `Deadline`
(a thread per call that ends with it), the same 0 for such a timeout, failures counted and kept for
display.
After `give_up_after` timeouts a scorer is not called again (each call would cost the whole timeout);
the remaining completions count as errors, so a reward that never returns delays a report by its
timeout, not forever.

>>> guarded = Guarded("half", lambda text, row: 0.5, timeout=1.0)
>>> guarded("any text", {}), guarded.errors
(0.5, 0)
>>> broken = Guarded("broken", lambda text, row: 1 / 0, timeout=1.0)
>>> broken("any text", {}), broken.errors, broken.first_error
(None, 1, 'ZeroDivisionError: division by zero')
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from grpokit.rewards.adapter import DEFAULT_TIMEOUT_S, Deadline, is_completion_timeout


class Guarded:
    def __init__(
        self,
        name: str,
        score: Callable[[str, dict[str, Any]], float],
        timeout: float | None = DEFAULT_TIMEOUT_S,
        give_up_after: int = 1,
    ) -> None:
        self.name, self.timeout, self.give_up_after = name, timeout, give_up_after
        self._call = Deadline(score, timeout) if timeout else score
        self.errors = 0
        self.timeouts = 0
        self.first_error: str | None = None

    @property
    def gave_up(self) -> bool:
        return self.timeouts >= self.give_up_after

    def __call__(self, text: str, row: dict[str, Any]) -> float | None:
        """The score; 0.0 when the completion ran the scorer past its timeout (a wrong answer, as in training);
        None when the scorer failed (raised, returned NaN/inf, timed out while an earlier call still overran,
        or was given up on). Timeouts count in `errors` too."""
        if self.gave_up:
            self.errors += 1
            return None
        try:
            value = float(self._call(text, row))
            if not math.isfinite(value):
                raise ValueError(f"returned {value}")
            return value
        except Exception as err:
            self.errors += 1
            self.timeouts += isinstance(err, TimeoutError)
            if self.first_error is None:
                self.first_error = f"{type(err).__name__}: {err}"[:300]
            return 0.0 if is_completion_timeout(err) else None

    def summary(self) -> str | None:
        """One sentence for a log or a report, or None when every call succeeded."""
        if not self.errors:
            return None
        text = f"{self.name}: {self.errors} completion(s) not scored (first: {self.first_error})"
        if self.gave_up:
            text += f"; stopped calling it after {self.timeouts} timeout(s) of {self.timeout:g} s"
        return text
