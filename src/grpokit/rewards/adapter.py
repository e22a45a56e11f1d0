"""The one adapter from a reward to TRL's batch signature, with failure isolation and timeouts.

`to_trl` wraps a reward for GRPOTrainer and names it, so TRL logs `rewards/<name>/mean`. A reward may
also carry a batch form, `reward.batch(texts, rows) -> list[float]`, equal to the reward item by item:
`to_trl` then scores TRL's whole batch in one call, and sample by sample only when that call fails.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpokit.errors import SandboxTimeout
from grpokit.rewards.registry import Reward
from grpokit.tasks.parsing import THINK_TAGS, Tags, normalize_completion

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
ON_ERROR = ("exclude", "zero")  # what a failed reward call scores: left out of its group, or 0


def to_trl(
    name: str,
    reward: Reward,
    think_prefilled: bool = False,
    error_log: Path | None = None,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    on_error: str = "exclude",
    tags: Tags = THINK_TAGS,
) -> Callable[..., list[float | None]]:
    """TRL calls reward functions with the batch: prompts, completions and each dataset column as a list.

    A reward that raises, returns NaN or infinity, or runs past `timeout` seconds on one sample does not
    end or block the run (one +inf reward turns every weight into NaN after a step; TRL has no timeout).
    A timeout the completion caused (`is_completion_timeout`: the call overran alone, or the sandbox
    killed its check) is a wrong answer and scores 0, whatever `on_error` says: a completion that stalls
    its verifier must not escape the negative advantage an honest wrong answer gets. A failure of the
    scoring machinery (the reward raised, returned NaN or infinity, the sandbox worker died or did not
    start, a timeout while an earlier call still overran) is not a wrong answer: with
    `on_error="exclude"` the sample scores None, and grpokit's trainer leaves it out of its group's mean
    and std with an advantage of 0; `on_error="zero"` scores it 0. Both are counted in `errors` (the
    trainer logs them as `rewards/<name>/errors`), and the first one is written to `error_log` with its
    completion. With `think_prefilled`, the thought's opening tag (`tags`) goes back in front of each
    completion before the reward reads it.

    A reward with a batch form (`reward.batch`) scores the whole batch in one call, given `timeout` per
    sample and one more (room for the batch form to find its own slow item, as the sandbox does by
    scoring a batch that timed out again item by item); if that call raises, runs past its time or
    returns the wrong number of scores, the batch is scored sample by sample as above, so a failure
    lands on its own sample.
    """
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error={on_error!r}; use one of {', '.join(ON_ERROR)}")
    call = Deadline(reward, timeout) if timeout else reward
    batch = getattr(reward, "batch", None)
    batch_deadline = Deadline(batch, timeout) if batch and timeout else None

    def call_batch(texts: list[str], rows: list[dict[str, Any]]) -> list[float]:
        if batch_deadline is None:
            return batch(texts, rows)
        return batch_deadline(texts, rows, timeout=timeout * (len(texts) + 1))

    def trl_reward(prompts: list, completions: list, **columns: Any) -> list[float]:
        rows = [
            {key: values[i] for key, values in columns.items() if isinstance(values, list)}
            for i in range(len(completions))
        ]
        texts = [normalize_completion(_text(completion), think_prefilled, tags) for completion in completions]
        batch_scores = _score_batch(name, call_batch, texts, rows) if batch else None
        scores: list[float | None] = []
        for i, (text, row) in enumerate(zip(texts, rows, strict=True)):
            try:
                value = float(batch_scores[i] if batch_scores is not None else call(text, row))
                if not math.isfinite(value):
                    raise ValueError(f"returned {value}")
            except Exception as err:
                timed_out = is_completion_timeout(err)
                value = 0.0 if timed_out or on_error == "zero" else None
                trl_reward.errors += 1
                _record_error(error_log, name, err, text)
            scores.append(value)
        return scores

    trl_reward.__name__ = name
    trl_reward.errors = 0  # failures and timeouts since the trainer last read them
    trl_reward.excludes_failures = on_error == "exclude"  # the trainer leaves a failed sample out of its group
    return trl_reward


def _score_batch(name: str, call_batch: Callable, texts: list[str], rows: list[dict]) -> list | None:
    """The batch form's scores, or None when the batch as a whole failed (then each sample is scored alone)."""
    try:
        scores = call_batch(texts, rows)
        if len(scores) != len(texts):
            raise ValueError(f"returned {len(scores)} scores for {len(texts)} completions")
        return list(scores)
    except Exception as err:
        logger.warning(
            "reward %s: its batch form failed (%s: %s); scoring sample by sample", name, type(err).__name__, err
        )
        return None


class CompletionTimeoutError(TimeoutError):
    """A reward call ran past its time on its own: nothing else overran meanwhile, so the completion it
    scored caused it. Scored 0, a wrong answer: a completion that stalls its verifier must not escape the
    negative advantage an honest wrong answer gets."""


_overrunning: set[threading.Thread] = set()  # abandoned calls still running, from every Deadline
_overrunning_lock = threading.Lock()


def _still_overrunning() -> bool:
    with _overrunning_lock:
        _overrunning.difference_update([t for t in _overrunning if not t.is_alive()])
        return bool(_overrunning)


def is_completion_timeout(err: BaseException) -> bool:
    """Whether `err` is a timeout the scored completion caused (a wrong answer), not a failure of the
    scoring machinery: a `Deadline` call that overran alone, or a sandbox call whose child was killed at
    its timeout (`SandboxTimeout`)."""
    return isinstance(err, CompletionTimeoutError | SandboxTimeout)


class Deadline:
    """Call a reward in a thread of its own and stop waiting after `timeout` seconds (or the call's own).

    Each call runs in a fresh daemon thread that ends when the reward returns: no thread outlives its
    call, and none waits idle between calls. Python cannot stop a thread, so a call that overruns is
    abandoned and runs on to its end (a verifier that may never return belongs in the sandbox, whose
    children are killed). While an abandoned call still runs it may hold what the next call needs (the
    sandbox, the CPU), so a timeout then is not laid on the completion: it raises a plain `TimeoutError`
    (a failure), and a timeout with nothing else overrunning raises `CompletionTimeoutError`.
    """

    def __init__(self, reward: Reward, timeout: float) -> None:
        self.reward, self.timeout = reward, timeout
        self.abandoned = 0

    def __call__(self, *args: Any, timeout: float | None = None) -> Any:
        timeout = timeout or self.timeout
        crowded = _still_overrunning()
        outcome: list[tuple[bool, Any]] = []
        thread = threading.Thread(target=self._run, args=(args, outcome), name="grpokit-reward", daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            self.abandoned += 1
            with _overrunning_lock:
                _overrunning.add(thread)
            if crowded:
                raise TimeoutError(
                    f"took longer than {timeout:g} s while an earlier call that overran was still running "
                    "(rewards[*].timeout)"
                )
            raise CompletionTimeoutError(f"took longer than {timeout:g} s (rewards[*].timeout)")
        ok, value = outcome[0]
        if not ok:
            raise value
        return value

    def _run(self, args: tuple, outcome: list) -> None:
        try:
            outcome.append((True, self.reward(*args)))
        except BaseException as err:  # handed back to the caller's thread
            outcome.append((False, err))


_recorded: set[tuple[str, str]] = set()


def _record_error(path: Path | None, name: str, err: Exception, completion: str) -> None:
    if path is None or (str(path), name) in _recorded:
        return
    _recorded.add((str(path), name))
    entry = {"reward": name, "error": f"{type(err).__name__}: {err}"[:500], "completion": completion[:4000]}
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def _text(completion: Any) -> str:
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        return "".join(str(m.get("content", "")) for m in completion)
    return str(completion)
