"""Run-health warnings: read GRPO's logged metrics and say in plain words what looks wrong, and the fix.

Each condition is judged on the mean of the last `window` logged GRPO steps and warned about at most
once per window. The first warning of a condition says its whole sentence (what, why, the fix); a
condition that still holds `window` steps later gets a short note with the new figure ("still: entropy
0.012 nats per token"). Warnings go to the log and, one JSON line each, to `warnings.jsonl` in the run
directory, where the report reads them.

>>> monitor = HealthMonitor(window=2)
>>> for step in (1, 2):
...     found = monitor.observe(step, {"frac_reward_zero_std": 1.0, "rewards/correctness/mean": 0.0})
>>> [w.condition for w in found]
['no_signal']
"""

from __future__ import annotations

import json
import logging
import math
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass
class HealthWarning:
    step: int
    condition: str
    message: str  # the whole sentence the first time, "still: <figure>" after
    repeat: bool = False


class HealthMonitor:
    def __init__(
        self,
        window: int = 5,
        max_completion_length: int | None = None,
        path: Path | None = None,
        group_size: int | None = None,
    ) -> None:
        if window < 2:
            raise ValueError(f"window={window}; judge health over at least 2 steps")
        self.window = window
        self.group_size = group_size  # completions per prompt: how often groups agree by chance
        self.max_completion_length = max_completion_length
        self.path = path
        self.history: deque[dict[str, float]] = deque(maxlen=window)
        self.first: dict[str, float] | None = None  # the first full window, for trends
        self.best: dict[str, float] | None = None  # the window with the highest correctness so far
        self.level: float | None = None  # the curriculum level (`curriculum/level`); a new one starts a new best
        self.level_since = 0  # steps_seen when that level began
        self.last_warned: dict[str, int] = {}
        self.warnings: list[HealthWarning] = []
        self.steps_seen = 0

    def observe(self, step: int, logs: dict[str, float]) -> list[HealthWarning]:
        """Take one logged GRPO step; return the warnings it raises (also logged and saved)."""
        self.history.append({k: float(v) for k, v in logs.items() if isinstance(v, int | float)})
        self.steps_seen += 1
        level = logs.get("curriculum/level")
        if level is not None and level != self.level:  # harder problems: correctness falls by design
            self.level, self.level_since, self.best = level, self.steps_seen, None
        found = [self._warn(step, *found) for found in self._errors(logs) if self._due(step, found[0])]
        if len(self.history) < self.window:
            return found
        now = self._mean_window()
        if self.first is None:
            self.first = now
        self._track_best(now)
        for condition, message, figure in self._judge(now, self.first, self.best or now):
            if self._due(step, condition):
                found.append(self._warn(step, condition, message, figure))
        return found

    def _track_best(self, now: dict[str, float]) -> None:
        """Keep the window with the highest correctness, among windows that hold one curriculum level's steps."""
        if self.steps_seen - self.level_since + 1 < self.window:
            return
        correct, best = _find(now, "correctness"), _find(self.best or {}, "correctness")
        if correct is not None and (best is None or correct > best):
            self.best = now

    def _mean_window(self) -> dict[str, float]:
        keys = set().union(*self.history)
        out = {}
        for key in keys:
            values = [h[key] for h in self.history if key in h and math.isfinite(h[key])]
            if values:
                out[key] = sum(values) / len(values)
        return out

    def _judge(self, now: dict[str, float], first: dict[str, float], best: dict[str, float]):
        w = self.window
        correct = _find(now, "correctness")
        # Correctness down to a third of its best window (and by 0.1 or more) while the total reward held: the
        # other rewards pay for it (e.g. equations moved into <answer> keep the format and `steps` rewards).
        # A third, not a half: the best of many noisy windows sits high (a flat countdown run, held-out 16-18%
        # throughout, had windows between 0.12 and 0.32).
        corr_best, reward_now, reward_best = _find(best, "correctness"), now.get("reward"), best.get("reward")
        if None not in (correct, corr_best) and correct <= corr_best / 3 and corr_best - correct >= 0.1:
            if None not in (reward_now, reward_best) and reward_now >= reward_best - 0.05:
                why = (
                    f"while the total reward stayed at {reward_now:.2f} (best window: {reward_best:.2f}): the other "
                    "rewards pay for wrong answers (reward hacking). Look at recent completions, give partial credit "
                    "less weight than correctness or pay it only with a right answer, and keep the last checkpoint "
                    "from before the fall"
                )
            else:
                why = (
                    "and the total reward with it: the policy is unlearning. Lower the learning rate or add a KL "
                    "penalty (grpo.beta), and keep the last checkpoint from before the fall"
                )
            yield (
                "correctness_falling",
                f"sampled correctness fell to {correct:.2f} from {corr_best:.2f} at its best over {w} steps, {why}.",
                f"correctness {correct:.2f} (best {corr_best:.2f})",
            )
        zero_std = now.get("frac_reward_zero_std")
        if zero_std is not None and zero_std >= 0.9:
            if correct is not None and correct <= 0.05:
                why = "the task looks too hard: almost every completion is wrong (start easier, or add a cold start)"
            elif correct is not None and correct >= 0.95:
                why = "the task looks too easy: almost every completion is right (make it harder: it is learned)"
            else:
                why = "the task is too hard or too easy, or sampling is too cold (raise grpo.temperature)"
            yield (
                "no_signal",
                f"{100 * zero_std:.0f}% of groups had identical rewards over the last {w} steps, so they carry no "
                f"learning signal; {why}, or sample more completions per prompt (grpo.num_generations).",
                f"{100 * zero_std:.0f}% of groups had identical rewards",
            )
        fmt_now, fmt_first = _find(now, "format"), _find(first, "format")
        corr_first = _find(first, "correctness")
        trend = None not in (fmt_now, fmt_first, correct, corr_first) and self.steps_seen >= 2 * w
        if trend and fmt_now - fmt_first >= 0.2 and abs(correct - corr_first) < 0.02:
            yield (
                "format_not_correctness",
                f"the format reward rose from {fmt_first:.2f} to {fmt_now:.2f} while correctness stayed at "
                f"{correct:.2f}: the model learns the tags, not the task. Give correctness more weight, make the "
                "task easier, or check that the verifier accepts right answers (grpokit rewards check RECIPE).",
                f"format reward {fmt_now:.2f}, correctness {correct:.2f}",
            )
        clipped = now.get("completions/clipped_ratio")
        if clipped is not None and clipped >= 0.5:
            yield (
                "truncated",
                f"{100 * clipped:.0f}% of completions hit grpo.max_completion_length over the last {w} steps: "
                "answers are cut off before </answer>. Raise max_completion_length, or discourage rambling with "
                "the overlong_penalty reward.",
                f"{100 * clipped:.0f}% of completions truncated",
            )
        length, length_first = now.get("completions/mean_length"), first.get("completions/mean_length")
        if length is not None and length_first:
            if length < 0.4 * length_first and length < 16:
                yield (
                    "length_collapse",
                    f"mean completion length fell from {length_first:.0f} to {length:.0f} tokens: the model stopped "
                    "reasoning (often a length reward or a format reward that pays empty thoughts). Check the "
                    "rewards with grpokit rewards check, or lower the learning rate.",
                    f"mean completion length {length:.0f} tokens",
                )
            limit = self.max_completion_length
            if length > 2.5 * length_first and (limit is None or length > 0.8 * limit):
                yield (
                    "length_explosion",
                    f"mean completion length grew from {length_first:.0f} to {length:.0f} tokens: expect truncation "
                    "and slow steps. Add overlong_penalty or length_cosine, or lower the learning rate.",
                    f"mean completion length {length:.0f} tokens",
                )
        entropy = now.get("entropy")
        # Low mean entropy alone is normal for answers that are mostly template (tags, fixed wording) with a few
        # uncertain tokens, while held-out accuracy still rises. It is a collapse when the groups agree in failure:
        # every completion of a problem wrong, in a quarter of the groups or more, and more often than independent draws
        # at the window's success rate would leave a group (chance_all_fail, plus 0.15 for the noise of ~40 groups in a
        # window). Groups that agree in success are what learning leaves (a policy that has learned a problem is sure of
        # it). Logs without the per-group figure (grpokit logs rewards/<name>/groups_all_fail) fall back to any
        # agreement beyond chance, which counts learned problems too.
        solved = correct is not None and correct >= 0.9
        failing = _find(now, "correctness", "/groups_all_fail")
        if failing is not None:
            stuck = failing >= max(0.25, chance_all_fail(correct, self.group_size) + 0.15)
            how = f" and {100 * failing:.0f}% of groups had every completion wrong"
        else:
            stuck = zero_std is None or zero_std >= max(0.5, chance_agreement(correct, self.group_size) + 0.15)
            how = "" if zero_std is None else f" and {100 * zero_std:.0f}% of groups had identical rewards"
        if entropy is not None and entropy < 0.05 and stuck and not solved:
            yield (
                "entropy_collapse",
                f"policy entropy is {entropy:.3f} nats per token{how}: sampling has become nearly deterministic, "
                "so the group's completions agree and learning stops. Lower the learning rate, raise "
                "grpo.temperature, or add a KL penalty (grpo.beta).",
                f"entropy {entropy:.3f} nats per token",
            )
        kl, kl_first = now.get("kl"), first.get("kl")
        if kl is not None and (kl > 1.0 or (kl_first is not None and kl_first > 0 and kl > 10 * kl_first > 0.05)):
            yield (
                "kl_growth",
                f"KL to the reference model is {kl:.3f} (it was {kl_first or 0:.3f}): the policy is moving fast "
                "and may be exploiting a reward. Lower the learning rate or raise grpo.beta.",
                f"KL {kl:.3f}",
            )

    def _errors(self, logs: dict[str, float]):
        for key, value in logs.items():
            if key.startswith("rewards/") and key.endswith("/errors") and isinstance(value, int | float) and value > 0:
                name = key.split("/")[1]
                yield (
                    f"reward_errors:{name}",
                    f"reward {name!r} failed on {value:g} completion(s) this step (they scored 0); see "
                    "reward_errors.jsonl in the run directory for an example.",
                    f"reward {name!r} failed on {value:g} completion(s)",
                )

    def _due(self, step: int, condition: str) -> bool:
        last = self.last_warned.get(condition)
        return last is None or step - last >= self.window

    def _warn(self, step: int, condition: str, message: str, figure: str) -> HealthWarning:
        repeat = condition in self.last_warned
        self.last_warned[condition] = step
        warning = HealthWarning(step, condition, f"still: {figure}" if repeat else message, repeat)
        self.warnings.append(warning)
        log.warning("run health (step %d): %s", step, warning.message)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(asdict(warning)) + "\n")
        return warning


def chance_agreement(success: float | None, group_size: int | None) -> float:
    """The share of groups whose correctness all agrees when each completion is right with probability
    `success` on its own: p^G + (1-p)^G. An upper bound for rewards with more parts than correctness.
    0 when either is unknown. Small groups agree often by chance: G=4 at p=0.8, 41%; G=8, 17%.

    >>> round(chance_agreement(0.8, 4), 2), round(chance_agreement(0.8, 8), 2)
    (0.41, 0.17)
    """
    if success is None or not group_size:
        return 0.0
    return min(max(success, 0.0), 1.0) ** group_size + chance_all_fail(success, group_size)


def chance_all_fail(success: float | None, group_size: int | None) -> float:
    """The share of groups with every completion wrong when each is right with probability `success` on
    its own: (1-p)^G. 0 when either is unknown.

    >>> round(chance_all_fail(0.5, 4), 4), chance_all_fail(None, 4)
    (0.0625, 0.0)
    """
    if success is None or not group_size:
        return 0.0
    return (1 - min(max(success, 0.0), 1.0)) ** group_size


def _find(metrics: dict[str, float], reward: str, suffix: str = "/mean") -> float | None:
    """The `suffix` figure of the first reward whose name starts with `reward` (format, format_lenient, ...),
    or None."""
    for key in sorted(metrics):
        if key.startswith(f"rewards/{reward}") and key.endswith(suffix):
            return metrics[key]
    return None
