"""What a GRPO stage adjusts as it learns: dynamic sampling, a curriculum, adaptive reward weights.

Each is a small object or function the trainer calls once per step, tested without a model:
- `fill_batch` (DAPO's dynamic sampling) keeps the groups whose rewards differ and fills the batch with
  them from extra rollouts; `DynamicSampling` runs one step of it on a GrpoTrainer (retry, replay, upfront).
- `max_variance_rows`, `group_advantages`: PODS's down-sampling to the rows whose rewards vary most.
- `failing_groups`: the groups with no success, which `retry` rolls out again within the step (Reinforce-Ada).
- `Replay`: informative prompts drawn again by later steps before new ones (Kimi k1.5's prioritised sampling).
- `Curriculum` steps a task parameter up its levels when the success rate passes a threshold.
- `AdaptiveWeights` shrinks the weight of a learned reward and lets it grow back when it slips.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
from trl.trainer.utils import nanstd  # TRL's own (Bessel-corrected, NaN-aware): the same advantages as TRL's

# Per-row tensors padded on the left (prompt side) or the right (completion side) of their row.
_LEFT = ("prompt_ids", "prompt_mask")
_RIGHT = ("completion_ids", "completion_mask", "old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps")
_ROWS = ("advantages", "rewards", *_LEFT, *_RIGHT)  # rewards: [B, K], see batch_rewards


def uniform_groups(rewards: torch.Tensor, group: int) -> torch.Tensor:
    """[B] or [B, K] rewards (groups of `group` rows in a row) -> [B / group] True where, in every column,
    the group's scored rewards are all equal (max == min over the non-NaN ones; a group with none scored
    is uniform). Decided on the rewards, not on the advantages: eight equal rewards of 0.8333 have a
    float32 group std of about 6e-8, and TRL's advantages of about -6e-4, not 0.

    >>> uniform_groups(torch.tensor([0.5, 0.5, 1.0, float("nan"), 1.0, 0.0]), 2).tolist()
    [True, True, False]
    """
    values = rewards.reshape(rewards.size(0) // group, group, -1)  # [groups, G, K]
    scored = ~torch.isnan(values)
    high = values.masked_fill(~scored, float("-inf")).amax(dim=1)  # [groups, K]
    low = values.masked_fill(~scored, float("inf")).amin(dim=1)
    return (high <= low).all(dim=1)


def informative_groups(rewards: torch.Tensor, group: int) -> torch.Tensor:
    """[B] (or [B, K]) rewards -> [B / group] True where the group's rewards differ (`uniform_groups`).

    >>> informative_groups(torch.tensor([0.0, 0.0, 1.0, 0.0]), 2).tolist()
    [False, True]
    """
    return ~uniform_groups(rewards, group)


def batch_rewards(batch: dict[str, Any]) -> torch.Tensor:
    """The per-row rewards that decide which of a scored batch's groups are uniform: the trainer's
    `rewards` ([B, K]); a batch without them, its advantages (a uniform group's are all exactly 0)."""
    rewards = batch.get("rewards")
    return batch["advantages"] if rewards is None else rewards


def failing_groups(rewards: torch.Tensor, success: torch.Tensor, group: int) -> torch.Tensor:
    """[B] (or [B, K]) rewards and [B] success-reward values -> [B / group] True where the group teaches
    nothing (its rewards are uniform) and no completion of it reached 1 (all wrong). A verifier failure
    (NaN) is not a failure of the policy.

    >>> failing_groups(torch.tensor([0.0, 0, 1, 1, 1, 0]), torch.tensor([0.0, 0, 1, 1, 1, 0]), 2).tolist()
    [True, False, False]
    """
    solved = success.view(-1, group) >= 1
    unknown = torch.isnan(success.view(-1, group)).any(dim=1)
    return uniform_groups(rewards, group) & ~solved.any(dim=1) & ~unknown


def max_variance_rows(rewards: torch.Tensor, group: int, keep: int) -> torch.Tensor:
    """[B] rewards (groups of `group` rows in a row) -> [B] mask of the `keep` rows of each group whose
    rewards vary most (PODS's max-variance down-sampling: some of the highest and the rest of the lowest,
    the split that maximises the variance). A group whose rewards are all equal keeps its first rows; an
    unscorable row (NaN) is kept only when too few rows were scored.

    >>> max_variance_rows(torch.tensor([0.0, 1.0, 0.5, 0.0]), 4, 2).tolist()
    [False, True, False, True]
    """
    out = torch.zeros_like(rewards, dtype=torch.bool)
    for start in range(0, rewards.numel(), group):
        values = rewards[start : start + group]
        scored = (~torch.isnan(values)).nonzero().squeeze(1)
        if scored.numel() <= keep:  # every scored row, then unscorable ones (advantage 0) up to `keep`
            rest = torch.isnan(values).nonzero().squeeze(1)[: keep - scored.numel()]
            out[start + torch.cat([scored, rest])] = True
            continue
        # One order, high to low (ties: first drawn first), so the highest and the lowest never overlap.
        order = scored[torch.sort(values[scored], descending=True, stable=True).indices]
        best, best_var = order[:keep], -1.0
        for top in range(keep, -1, -1):  # `top` highest and `keep - top` lowest rows
            rows = torch.cat([order[:top], order[order.numel() - (keep - top) :]])
            var = float(values[rows].var(unbiased=False))
            if var > best_var + 1e-12:
                best, best_var = rows, var
        out[start + best] = True
    return out


def group_advantages(rewards: torch.Tensor, group: int, scale: str = "group") -> torch.Tensor:
    """[B] rewards -> [B] advantages as TRL's sum_then_normalize computes them for groups of `group` rows:
    the reward less its group's mean, divided by the group's (`scale: group`) or the batch's (`batch`)
    standard deviation plus 1e-4, or not divided (`none`); unscorable rows (NaN) are left out and get 0,
    and so does every row of a uniform group (`uniform_groups`), whose float rounding would otherwise leave
    each row a small advantage of one sign.

    >>> group_advantages(torch.tensor([1.0, 0.0, 2.0, 2.0]), 2, "none").tolist()
    [0.5, -0.5, 0.0, 0.0]
    """
    grouped = rewards.view(-1, group)
    advantages = grouped - torch.nanmean(grouped, dim=1, keepdim=True)
    if scale == "group":
        advantages = advantages / (nanstd(grouped, dim=1).unsqueeze(1) + 1e-4)
    elif scale == "batch":
        advantages = advantages / (nanstd(rewards) + 1e-4)
    elif scale != "none":
        raise ValueError(f"scale_rewards={scale!r}; use group, batch or none")
    advantages = advantages.masked_fill(uniform_groups(rewards, group).unsqueeze(1), 0.0)
    return torch.nan_to_num(advantages, nan=0.0).view(-1)


def fill_batch(
    first: dict[str, Any],
    more: Callable[[int, int], list[dict[str, Any]]],
    group: int,
    max_extra_groups: int,
    pad_id: int,
    rows_drawn: int | None = None,
) -> tuple[dict[str, Any], dict[str, float]]:
    """A batch of as many groups as `first` has, informative groups first.

    `more(n, wanted)` rolls out and scores at most `n` (at least 1) more groups, as a list of batches in the
    trainer's own form (parts of a round drawn from different sources, e.g. retries and new prompts);
    `wanted` is the number of informative groups the batch still lacks; an empty list ends the rounds. Rounds
    go on until the informative groups fill the batch or `max_extra_groups` extra groups were drawn; uniform
    groups fill what is left (their gradient is exactly zero). `rows_drawn`: rows rolled out per group, when
    more than the `group` scored (down-sampling); extra rollouts are counted in them. Returns the batch and
    its statistics.
    """
    size = first["advantages"].numel() // group
    batches, extra = [first], 0
    found = int(informative_groups(batch_rewards(first), group).sum())
    while found < size and extra < max_extra_groups:
        n = min(size, max_extra_groups - extra)
        drawn = more(n, size - found)
        if not drawn:  # nothing more to draw this step
            break
        for batch in drawn:
            batches.append(batch)
            extra += batch["advantages"].numel() // group
            found += int(informative_groups(batch_rewards(batch), group).sum())
    picks: list[tuple[int, int]] = []  # (batch, group) informative first, in order drawn
    rest: list[tuple[int, int]] = []
    for b, batch in enumerate(batches):
        for g, useful in enumerate(informative_groups(batch_rewards(batch), group).tolist()):
            (picks if useful else rest).append((b, g))
    chosen = (picks + rest)[:size]
    merged = _take_groups(batches, chosen, group, pad_id)
    stats = {
        "dynamic/kept_frac": min(len(picks), size) / size,  # informative groups in the batch that trains
        "dynamic/extra_rollouts": float(extra * (rows_drawn or group)),
        "dynamic/informative_drawn_frac": len(picks) / (size + extra),
    }
    return merged, stats


def _take_groups(batches: list[dict[str, Any]], chosen: list[tuple[int, int]], group: int, pad_id: int) -> dict:
    unknown = {k for b in batches for k, v in b.items() if isinstance(v, torch.Tensor) and v.dim() and k not in _ROWS}
    if unknown:
        raise ValueError(f"dynamic sampling cannot merge batches holding {sorted(unknown)} (images, tools)")
    out: dict[str, Any] = {}
    for key in _ROWS:
        parts = [batches[b][key][g * group : (g + 1) * group] for b, g in chosen if batches[b].get(key) is not None]
        if not parts:
            continue
        if len(parts) != len(chosen):
            raise ValueError(f"dynamic sampling: {key} is missing from some of the merged batches")
        if parts[0].dim() == 1:
            out[key] = torch.cat(parts)
            continue
        width = max(p.size(1) for p in parts)
        fill = pad_id if key.endswith("_ids") else 0
        padded = []
        for p in parts:
            pad = p.new_full((p.size(0), width - p.size(1)), fill)
            padded.append(torch.cat([pad, p] if key in _LEFT else [p, pad], dim=1))
        out[key] = torch.cat(padded)
    for key, value in batches[0].items():
        if key not in out and key != "num_items_in_batch":
            out[key] = value
    # TRL's loss is normalised by the batch's completion tokens: count the batch that trains.
    out["num_items_in_batch"] = out["completion_mask"].sum()
    return out


class Rolling:
    """Mean of the last `window` values."""

    def __init__(self, window: int) -> None:
        self.values: deque[float] = deque(maxlen=window)

    def add(self, value: float) -> float:
        self.values.append(value)
        return sum(self.values) / len(self.values)

    @property
    def full(self) -> bool:
        return len(self.values) == self.values.maxlen


class Curriculum:
    """Moves a task parameter through `levels` when the rolling success rate reaches `threshold`.

    >>> c = Curriculum("max_value", [10, 20, 50], threshold=0.8, window=2)
    >>> [c.update(x) for x in (0.9, 0.5, 0.9, 0.9, 0.95, 1.0, 1.0)]
    [0, 0, 0, 1, 1, 2, 2]
    """

    def __init__(self, param: str, levels: Sequence[Any], threshold: float, window: int) -> None:
        self.param, self.levels, self.threshold, self.window = param, list(levels), threshold, window
        self.level = 0
        self.rate = Rolling(window)

    @property
    def value(self) -> Any:
        return self.levels[self.level]

    def update(self, success: float) -> int:
        """Record one step's success rate; return the level the next step trains at."""
        mean = self.rate.add(success)
        if self.rate.full and mean >= self.threshold and self.level + 1 < len(self.levels):
            self.level += 1
            self.rate = Rolling(self.window)  # the new level earns its own success rate
        return self.level


class AdaptiveWeights:
    """Reward weights that move with each reward's rolling success rate (see config.AdaptiveSection).

    >>> from grpokit.recipe.schema import AdaptiveSection
    >>> w = AdaptiveWeights({"format": AdaptiveSection(target=0.9, rate=0.5, min_weight=0.1, max_weight=1.0, window=1)},
    ...                     {"format": 1.0})
    >>> [round(w.update({"format": r})["format"], 4) for r in (1.0, 1.0, 1.0, 1.0, 0.2)]
    [0.5, 0.25, 0.125, 0.1, 0.15]
    """

    def __init__(self, specs: dict[str, Any], weights: dict[str, float]) -> None:
        self.specs, self.weights = specs, dict(weights)
        self.rates = {name: Rolling(spec.window) for name, spec in specs.items()}

    def update(self, success: dict[str, float]) -> dict[str, float]:
        for name, spec in self.specs.items():
            if name not in success:
                continue
            mean = self.rates[name].add(success[name])
            factor = 1 - spec.rate if mean >= spec.target else 1 + spec.rate
            self.weights[name] = min(spec.max_weight, max(spec.min_weight, self.weights[name] * factor))
        return dict(self.weights)


class Replay:
    """Prompts whose groups were informative, to be drawn again by later steps, newest first.

    Each prompt comes back at most `tries` times (a prompt the policy keeps half-solving does not take
    every extra round); the queue keeps the `capacity` newest and forgets older ones.

    >>> r = Replay(tries=1, capacity=2)
    >>> r.push([({"q": 1}, 0), ({"q": 2}, 0), ({"q": 3}, 0), ({"q": 4}, 1)])
    >>> r.take(5)
    [({'q': 3}, 1), ({'q': 2}, 1)]
    >>> r.push([({"q": 3}, 1)])  # drawn once already: done
    >>> len(r)
    0
    """

    def __init__(self, tries: int, capacity: int) -> None:
        if tries < 1 or capacity < 1:
            raise ValueError(f"Replay(tries={tries}, capacity={capacity}): both must be >= 1")
        self.tries = tries
        self.queue: deque[tuple[dict[str, Any], int]] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self.queue)

    def push(self, found: Sequence[tuple[dict[str, Any], int]]) -> None:
        """Queue informative prompts as (row, times drawn again so far); those out of tries are dropped."""
        self.queue.extend((row, tries) for row, tries in found if tries < self.tries)

    def take(self, groups: int) -> list[tuple[dict[str, Any], int]]:
        """Up to `groups` prompts, newest first, each with the count it will have once drawn again."""
        return [(row, tries + 1) for row, tries in (self.queue.pop() for _ in range(min(groups, len(self.queue))))]

    def clear(self) -> None:
        self.queue.clear()

    def state(self) -> list[list[Any]]:
        return [[row, tries] for row, tries in self.queue]

    def load(self, state: list[list[Any]]) -> None:
        self.queue.extend((row, tries) for row, tries in state)


def extra_prompt_rows(dataset: Any, groups: int, group: int, seed: str) -> list[dict[str, Any]]:
    """`groups` prompts drawn from `dataset` (seeded by `seed`), each repeated `group` times in a row."""
    rng = random.Random(seed)
    rows = []
    for _ in range(groups):
        row = dataset[rng.randrange(len(dataset))]
        rows.extend(dict(row) for _ in range(group))
    return rows


class DynamicSampling:
    """One training step's dynamic sampling: `fill()` refills the scored batch with informative groups
    (`fill_batch`), drawing each extra round from, in order, the first round already rolled out with the
    batch (upfront), this step's failed prompts again (retry, with `guide`'s demonstration on a prompt's
    last try), the replay queue, then new prompts; it queues the informative prompts for replay and logs
    `dynamic/*`. `trainer` is the GrpoTrainer: it rolls out and scores (`_score`, `_score_aside`,
    `_score_together`) and holds the settings and the replay queue.

    Every round's seed is `dynamic:<seed>:<step>:<round>`, rounds numbered from 1 in the order drawn, so
    a seeded run draws the same prompts.
    """

    def __init__(
        self,
        trainer: Any,
        inputs: list[dict[str, Any]],
        batch: dict[str, Any],
        row_success: torch.Tensor | None,
        drawn: tuple[list[dict[str, Any]], dict[str, Any], torch.Tensor | None] | None = None,
    ) -> None:
        self.trainer, self.inputs, self.batch, self.row_success = trainer, inputs, batch, row_success
        self.group, self.kept = trainer.num_generations, trainer._group_rows  # rows drawn; rows per scored group
        self.data = trainer._prompt_data()
        self.size = batch["advantages"].numel() // self.kept
        self.rounds = iter(range(1, 1_000_000))
        self.found: list[tuple[dict[str, Any], int]] = []  # this step's informative prompts, queued at its end
        self.failed: list[tuple[dict[str, Any], int]] = []  # this step's failed prompts, times rolled out again
        self.replayed = self.replayed_useful = self.retried = self.retried_useful = self.guided = 0
        self.ready = [drawn] if drawn is not None else []
        # New prompts' groups a step may draw. Upfront, they were all drawn with the batch, and retries have
        # an allowance of their own: one batch's worth of groups.
        self.budget = round(trainer.dynamic_max_extra * self.size)
        self.left = self.budget
        self.allowance = self.size if trainer.upfront and trainer.retry else 0

    def fill(self) -> dict[str, Any]:
        """The batch that trains (as many groups as the scored batch, informative first); logs the step's
        `dynamic/*` figures into the trainer's metrics."""
        trainer, group, kept = self.trainer, self.group, self.kept
        first = list(self.inputs[::group])
        self.queue(first, [0] * len(first), [0] * len(first), self.batch, self.row_success)
        batch, stats = fill_batch(
            self.batch, self.more, kept, self.budget + self.allowance, trainer._tokenizer.pad_token_id, rows_drawn=group
        )
        if self.ready:  # upfront, and the batch's own groups all differed: the extra round was drawn for nothing
            stats["dynamic/extra_rollouts"] += float(self.ready[0][1]["advantages"].numel() // kept * group)
        if trainer.replay is not None:
            trainer.replay.push(self.found)
            stats["dynamic/replayed"] = float(self.replayed)
            if self.replayed:
                stats["dynamic/replayed_informative_frac"] = self.replayed_useful / self.replayed
        if trainer.retry:
            stats["dynamic/retried"] = float(self.retried)
            if self.retried:
                stats["dynamic/retried_informative_frac"] = self.retried_useful / self.retried
        if trainer.guide is not None:
            stats["dynamic/guided"] = float(self.guided)
        for key, value in stats.items():
            trainer._metrics["train"][key].append(value)
        return batch

    def more(self, groups: int, wanted: int) -> list[dict[str, Any]]:
        """`fill_batch`'s `more`: one round of at most `groups` groups, from the first source that has any."""
        trainer, group = self.trainer, self.group
        if self.ready:  # upfront: the first round (its seed) was rolled out with the batch
            next(self.rounds)
            rows, scored, success = self.ready.pop()
            self.left -= len(rows) // group
            self.queue(rows[::group], [0] * (len(rows) // group), [0] * (len(rows) // group), scored, success)
            return [scored]
        if self.failed:  # this step's failed prompts first: more tries where the policy has not found the answer
            taken, self.failed[:] = self.failed[:groups], self.failed[groups:]
            parts = [self.retries(taken)]
            # Room in the round that the retries alone cannot fill, and none of them comes back: the new
            # prompts the next round would draw are rolled out with them, one decode instead of two.
            room = min(groups - len(taken), self.left)
            if (
                room
                and len(taken) < wanted
                and all(r + 1 == trainer.retry for _, r in taken)
                and not (trainer.replay is not None and len(trainer.replay))
            ):
                parts.append(self.new_prompts(room))
            return trainer._score_together(parts)
        if trainer.replay is not None and len(trainer.replay):
            taken = trainer.replay.take(groups)
            rows = [row for row, _ in taken]
            scored = trainer._score_aside([dict(row) for row in rows for _ in range(group)], "replay/")
            self.replayed += len(rows)
            self.replayed_useful += self.note(rows, [t for _, t in taken], [0] * len(rows), scored)
            return [scored]
        if self.left < 1:  # upfront: what remains is the retries' allowance
            return []
        rows, score = self.new_prompts(min(groups, self.left))
        return [score(rows)]

    def note(self, rows: list[dict[str, Any]], tries: list[int], retries: list[int], scored: dict[str, Any]) -> int:
        """Queue the informative prompts for replay and the failed ones for a retry; the informative count.
        Reads the success of the batch scored last: call it right after scoring `scored`."""
        return self.queue(rows, tries, retries, scored, self.trainer._row_success)

    def queue(
        self,
        rows: list[dict[str, Any]],
        tries: list[int],
        retries: list[int],
        scored: dict[str, Any],
        success: torch.Tensor | None,
    ) -> int:
        """`note` with the success rewards given: one prompt row per group of `scored`."""
        trainer = self.trainer
        if trainer.replay is None and not trainer.retry:  # nothing to queue or count
            return 0
        useful = informative_groups(batch_rewards(scored), self.kept).tolist()
        if trainer.replay is not None:
            self.found.extend((row, t) for row, t, u in zip(rows, tries, useful, strict=True) if u)
        if trainer.retry and success is not None:
            lost = failing_groups(batch_rewards(scored), success, self.kept).tolist()
            self.failed.extend(
                (row, r) for row, r, f in zip(rows, retries, lost, strict=True) if f and r < trainer.retry
            )
        return sum(useful)

    def retries(self, taken: list[tuple[dict[str, Any], int]]) -> tuple[list[dict[str, Any]], Callable]:
        """Failed prompts' groups rolled out again, and how they are scored (`score_retries`)."""
        prompts = [row for row, _ in taken]
        return [dict(row) for row in prompts for _ in range(self.group)], partial(self.score_retries, taken)

    def score_retries(self, taken: list[tuple[dict[str, Any], int]], rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Score a retry round (logged under retry/); on a prompt's last retry its group's first row is the
        guide's demonstration."""
        trainer, prompts = self.trainer, [row for row, _ in taken]
        if trainer.guide is not None:  # each group's first row, on the prompt's last retry
            last = [i for i, (_, r) in enumerate(taken) if r + 1 == trainer.retry]
            trainer._guided = {i * self.group: trainer._demonstration_ids(prompts[i]) for i in last}
            self.guided += len(last)
        try:
            scored = trainer._score_aside(rows, "retry/")
        finally:
            trainer._guided = {}
        self.retried += len(prompts)
        self.retried_useful += self.note(prompts, [0] * len(prompts), [r + 1 for _, r in taken], scored)
        return scored

    def new_prompts(self, groups: int) -> tuple[list[dict[str, Any]], Callable]:
        """`groups` new prompts' groups (the round's own seed), and how they are scored (`score_new`)."""
        trainer = self.trainer
        seed = f"dynamic:{trainer.args.seed}:{trainer.state.global_step}:{next(self.rounds)}"
        self.left -= groups
        return extra_prompt_rows(self.data, groups, self.group, seed), partial(self.score_new, groups)

    def score_new(self, groups: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
        scored = self.trainer._score(rows)
        self.note(rows[:: self.group], [0] * groups, [0] * groups, scored)
        return scored
