"""TRL's GRPOTrainer with one saving (no training pass over completions that carry no gradient), per-reward
error counts in the logs, and checkpoints marked complete only once fully written.

A group whose completions all get the same reward has advantage 0 for every completion. With no KL
term (beta = 0), no entropy bonus, and a loss normalised by the generation batch's token count (TRL's
default `dapo`, and `cispo`), such rows add exactly zero to the loss and its gradient. They are dropped
before the forward/backward pass, so the update is the same and the pass costs only what teaches.
Measured on the default recipe: 25-100% of the groups per step (about half on average) are uniform
once the cold start has taught the format, so that share of the training pass was spent on zeros.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from trl import GRPOTrainer
from trl.models import unwrap_model_for_generation

from grpokit import disk
from grpokit.checkpoints import mark_complete
from grpokit.rollout import RolloutCopy, SamplingSettings, sample, wants_copy

log = logging.getLogger(__name__)

# Loss types whose normaliser is `num_items_in_batch`, fixed before any row is dropped.
_TOKEN_NORMALISED_LOSSES = ("dapo", "cispo")


class GrpoTrainer(GRPOTrainer):
    def __init__(
        self,
        *args: Any,
        skip_zero_advantage: bool = True,
        rollout_engine: str = "grpokit",
        stop_texts: tuple[str, ...] = (),
        rollout_copy: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.rollout_engine, self.stop_texts = rollout_engine, tuple(stop_texts)
        self.rollout_copy = RolloutCopy(self._rollout_dtype()) if rollout_copy else None
        self.record_prompts = False  # train.RankProbe turns it on (diagnostics for several processes)
        self.prompts_seen: list[str] = []
        self.skip_zero_advantage = skip_zero_advantage and skipping_is_exact(self.args)
        if skip_zero_advantage and not self.skip_zero_advantage:
            log.info(
                "training on every completion: skipping zero-advantage rows is exact only with beta=0, "
                "no entropy bonus and loss_type in %s",
                _TOKEN_NORMALISED_LOSSES,
            )

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        settings = self._rollout_settings(images, multimodal_fields)
        if settings is None:  # vLLM, images, tools or a sampling option grpokit's sampler does not have
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                generation_kwargs=self.generation_kwargs,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as unwrapped_model,
            torch.no_grad(),
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
        ):
            model, autocast = self._sampling_model(unwrapped_model)
            # The training pass's precision for the rollout's matmuls too (bf16 where it measured faster).
            with torch.autocast(self.accelerator.device.type, dtype=torch.bfloat16, enabled=autocast):
                completions = sample(
                    model,
                    prompt_ids,
                    settings,
                    eos_ids=self.eos_token_ids,
                    pad_id=self._tokenizer.pad_token_id,
                    tokenizer=self._tokenizer,
                )
        return completions, None

    def _rollout_dtype(self) -> torch.dtype:
        if self.args.bf16:
            return torch.bfloat16
        if self.args.fp16:
            return torch.float16
        return next(self.model.parameters()).dtype

    def _sampling_model(self, policy: Any) -> tuple[Any, bool]:
        """(model to sample from, whether to autocast): the merged copy for a LoRA policy that is whole on
        this process (ZeRO-3 and FSDP shard it: they sample on the policy)."""
        sharded = self.is_fsdp_enabled or (
            self.is_deepspeed_enabled and self.accelerator.state.deepspeed_plugin.zero_stage == 3
        )
        if self.rollout_copy is None or sharded or not wants_copy(policy):
            return policy, bool(self.args.bf16)
        return self.rollout_copy.get(policy, self.state.global_step), False

    def _rollout_settings(self, images: Any, multimodal_fields: Any) -> SamplingSettings | None:
        if (
            self.rollout_engine != "grpokit"
            or self.use_vllm
            or (images is not None and any(images))
            or multimodal_fields
        ):
            return None
        if getattr(self, "tools", None) or self.args.use_transformers_paged:
            return None
        config = self.generation_config
        if (config.repetition_penalty or 1.0) != 1.0 or config.min_p or not config.do_sample:
            return None
        return SamplingSettings(
            max_new_tokens=config.max_new_tokens,
            temperature=config.temperature or 1.0,
            top_k=config.top_k or 0,
            top_p=config.top_p if config.top_p is not None else 1.0,
            min_new_tokens=config.min_new_tokens or 0,
            stop_texts=self.stop_texts,
        )

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        folder = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
        # Free space checked first; a full disk mid-write removes the unfinished folder and says how to resume.
        needed = disk.checkpoint_bytes(self.model, self.optimizer, folder.parent)
        with disk.saving(folder, needed, f"GRPO {folder.name}"):
            super()._save_checkpoint(model, trial)
        if self.args.should_save:  # the main process marks the checkpoint complete, last
            mark_complete(folder, self.state.global_step)

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        if self.record_prompts:
            self.prompts_seen.extend(str(x.get("prompt", "")) for x in inputs if isinstance(x, dict))
        batch = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        for func in self.reward_funcs:
            if hasattr(func, "errors"):  # grpokit's adapter: failures since the last batch
                self._metrics[mode][f"rewards/{func.__name__}/errors"].append(float(func.errors))
                func.errors = 0
        if not (self.skip_zero_advantage and self.model.training):
            return batch
        mask = keep_mask(batch)
        if self.accelerator.num_processes > 1:
            # TRL gathers per-row tensors across ranks in its loss (clip ratios): every rank must keep the
            # same number of rows. Ranks with fewer informative rows keep extra zero-advantage rows,
            # whose gradient is exactly zero.
            count = torch.tensor([int(mask.sum())], device=mask.device)
            mask = pad_mask(mask, int(self.accelerator.gather(count).max()))
        kept = int(mask.sum())
        self._metrics["train"]["rows_trained_frac"].append(kept / mask.numel())
        return batch if kept == mask.numel() else _select_rows(batch, mask)


def skipping_is_exact(args: Any) -> bool:
    return (
        args.beta == 0.0
        and args.loss_type in _TOKEN_NORMALISED_LOSSES
        and getattr(args, "entropy_coef", 0.0) == 0.0
        and not getattr(args, "use_adaptive_entropy", False)
        and args.steps_per_generation == 1
    )


def keep_mask(batch: dict[str, Any]) -> torch.Tensor:
    """Rows with a non-zero advantage; at least one row, so the step still has an input (its gradient is 0)."""
    mask = batch["advantages"] != 0  # [B]
    if not mask.any():
        mask[0] = True
    return mask


def pad_mask(mask: torch.Tensor, target: int) -> torch.Tensor:
    """Switch on unselected rows until `target` rows are selected.

    >>> pad_mask(torch.tensor([False, True, False, False]), 3).tolist()
    [True, True, True, False]
    """
    missing = target - int(mask.sum())
    if missing > 0:
        mask = mask.clone()
        mask[(~mask).nonzero().squeeze(1)[:missing]] = True
    return mask


def _select_rows(batch: dict[str, Any], mask: torch.Tensor) -> dict[str, Any]:
    rows = mask.numel()
    out = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.size(0) == rows:
            out[key] = value[mask]
        elif isinstance(value, list) and len(value) == rows:
            out[key] = [v for v, k in zip(value, mask.tolist(), strict=True) if k]
        else:
            out[key] = value  # scalars such as num_items_in_batch stay as computed over the whole batch
    return out
