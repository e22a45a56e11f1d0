"""TRL's GRPOTrainer with grpokit's rollouts and training pass (`GrpoOptions`), no training pass over
completions that carry no gradient, per-reward error counts in the logs, and checkpoints marked
complete only once fully written.

A group whose completions all get the same reward has advantage 0 for every completion. With no KL
term (beta = 0), no entropy bonus or entropy quantile, no MoE router loss, and a loss normalised by the
generation batch's token count (TRL's default `dapo`, and `cispo`), such rows add exactly zero to the
loss and its gradient. They are dropped before the forward/backward pass: the same update, and the
pass costs only what teaches.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from trl import GRPOTrainer
from trl.data_utils import is_conversational
from trl.models import unwrap_model_for_generation
from trl.trainer.callbacks import SyncRefModelCallback

from grpokit.kernels import casts, fused_lora, memory, prefix
from grpokit.kernels.attention import use_grouped_attention
from grpokit.rollout.sampler import (
    RolloutCopy,
    SamplingSettings,
    base_model,
    finished,
    sample,
    unsupported_settings,
    wants_copy,
)
from grpokit.runs import disk
from grpokit.runs.checkpoints import mark_complete
from grpokit.stages.dynamic_sampling import (
    AdaptiveWeights,
    Curriculum,
    DynamicSampling,
    Replay,
    batch_rewards,
    extra_prompt_rows,
    group_advantages,
    informative_groups,
    max_variance_rows,
    uniform_groups,
)
from grpokit.tasks.base import tokenize_prompts

log = logging.getLogger(__name__)

# Loss types whose normaliser is `num_items_in_batch`, fixed before any row is dropped.
_TOKEN_NORMALISED_LOSSES = ("dapo", "cispo")
SCHEDULES_FILE = "grpokit-schedules.json"  # in each checkpoint: curriculum level, adaptive weights


@dataclass(frozen=True)
class GrpoOptions:
    """What GrpoTrainer adds to TRL's GRPOTrainer, as one value: the rollout engine, the training pass,
    dynamic sampling, curriculum and adaptive weights. `grpokit.stages.grpo.trainer_options` builds it from
    a recipe; the defaults are a plain GrpoTrainer's (grpokit's sampler, no dynamic sampling)."""

    skip_zero_advantage: bool = True
    rollout_engine: str = "grpokit"  # rollout.engine
    stop_texts: tuple[str, ...] = ()
    rollout_copy: bool = True  # rollout.merged_copy
    # train_pass
    shared_prefix: bool = True
    micro_batch_rows: int | None = None
    sampler_logprobs: bool = False
    importance_sampling_cap: float | None = None
    # (final temperature, first step, last step) from rollout.final_temperature; None: constant
    temperature_schedule: tuple[float, int, int] | None = None
    # dynamic_sampling (dynamic_max_extra None: off)
    dynamic_max_extra: float | None = None
    dynamic_replay: int = 0
    dynamic_retry: int = 0
    retry_reward: str = "correctness"
    dynamic_upfront: bool = False
    downsample_to: int | None = None
    guide: Callable[[dict[str, Any]], str] | None = None
    # (schedule, one prompt dataset per level, the reward that measures success)
    curriculum: tuple[Curriculum, list[Any], str] | None = None
    adaptive: AdaptiveWeights | None = None


class GrpoTrainer(GRPOTrainer):
    def __init__(self, *args: Any, options: GrpoOptions | None = None, **kwargs: Any) -> None:
        """TRL's GRPOTrainer(*args, **kwargs), with grpokit's additions as `options` (defaults: GrpoOptions())."""
        options = GrpoOptions() if options is None else options
        super().__init__(*args, **kwargs)
        # (final temperature, first step, last step): grpo.temperature (args.temperature) up to the first step,
        # linear to the final one at the last, then constant; None: grpo.temperature throughout.
        self.temperature_schedule = options.temperature_schedule
        if options.temperature_schedule is not None:
            self._check_temperature_reaches_the_loss()
        for model in (self.model, self.ref_model):  # short sequences on a CPU: grpokit.kernels.attention (else sdpa)
            if model is not None:
                use_grouped_attention(base_model(model))
        fused_lora.install_on(self)
        self.shared_prefix = options.shared_prefix and self._shared_prefix_allowed()
        self.micro_batch_rows = (
            options.micro_batch_rows if options.micro_batch_rows and self._micro_batches_allowed() else None
        )
        self._recipe_micro_batch_rows = self.micro_batch_rows  # what a smaller size learned after an OOM replaced
        # The rows of the step being trained, and those to train again after the pass ran out of memory.
        self._pass_inputs: dict[str, Any] | None = None
        self._pass_retry: dict[str, Any] | None = None
        self._logged_before_pass: dict[str, int] = {}
        # Schedules (grpokit.stages.dynamic_sampling): dynamic sampling with at most this many extra batches' rollouts;
        # a curriculum with one prompt dataset per level and the reward that measures success; weights.
        self.dynamic_max_extra = options.dynamic_max_extra
        # Informative prompts drawn again in later steps' extra rollouts (4 batches' worth kept, newest first).
        groups = self.args.per_device_train_batch_size * self.args.steps_per_generation // self.num_generations
        self.replay = (
            Replay(options.dynamic_replay, 4 * groups) if options.dynamic_replay and options.dynamic_max_extra else None
        )
        # Failed prompts rolled out again within their step, at most this many times each.
        self.retry = options.dynamic_retry if options.dynamic_max_extra else 0
        self.retry_reward = options.retry_reward  # what retry calls success (the curriculum's is self.success_reward)
        # The first extra round drawn with the batch's own groups, in one rollout (not with replay).
        self.upfront = bool(options.dynamic_upfront and options.dynamic_max_extra and self.replay is None)
        self._row_success: torch.Tensor | None = None  # the last scored batch's success reward per row
        # PODS's down-sampling: each group's rows whose rewards vary most train, this many of num_generations.
        self.downsample_to = (
            options.downsample_to if options.downsample_to and options.downsample_to < self.num_generations else None
        )
        if self.downsample_to and self.accelerator.num_processes > 1:
            raise ValueError("dynamic_sampling.downsample_to runs in one process; leave it out to train on several")
        self._row_rewards: torch.Tensor | None = None  # the last scored batch's summed reward per row
        self._decided_rewards: torch.Tensor | None = None  # [B, K] of all processes: which groups are uniform
        # The entropy of every row grpokit's sampler drew this step (`entropy_sum`, `tokens`), logged as
        # `entropy`; TRL's, over the rows the training pass trains, moves to `entropy/trained` (`_compute_loss`).
        self._sampled_entropy: dict[str, float] | None = None
        self._entropy_of_sampled_rows = False
        self.curriculum, self.level_data, self.success_reward = options.curriculum or (None, [], "")
        self.adaptive = options.adaptive
        if self.ref_model is not None:
            # TRL reloads a full fine-tune's reference from the checkpoint it came from; after an earlier
            # stage (a cold start, a format stage) that is a model that never wrote the tags. The KL term
            # holds a stage near the policy it started from. (LoRA: TRL copies the adapter as "ref".)
            SyncRefModelCallback.sync_target_model(self.model, self.ref_model, alpha=1.0)
        self.rollout_engine, self.stop_texts = options.rollout_engine, tuple(options.stop_texts)
        # A row that ends on a stop text has no EOS, which TRL would read as truncated: grpokit decides.
        self.mask_truncated_rows, self.mask_truncated_completions = self.mask_truncated_completions, False
        self.rollout_fallback = self._rollout_fallback()
        if self.rollout_fallback:  # one line for the run: a setting is never dropped silently
            lost = f", without stopping at {' or '.join(self.stop_texts)}" if self.stop_texts else ""
            log.warning("rollouts on TRL's generation%s: grpokit's sampler %s", lost, self.rollout_fallback)
        # A failed prompt's last retry: one row of its group is the demonstration `guide(row)` writes, in place
        # of a draw of grpokit's sampler (so not on TRL's or vLLM's generation).
        if options.guide is not None and self.retry and self.rollout_fallback:
            log.warning("dynamic_sampling.guide ignored: the demonstration replaces a draw of grpokit's sampler")
        self.guide = options.guide if self.retry and not self.rollout_fallback else None
        self._guided: dict[int, list[int]] = {}  # row of the batch being rolled out -> its demonstration's ids
        self._ahead: _DrawnAhead | None = None  # rows rolled out together, handed out as each part is scored
        self.rollout_copy = RolloutCopy(self._rollout_dtype()) if options.rollout_copy else None
        self.sampler_logprobs = options.sampler_logprobs and self._sampler_logprobs_allowed()
        # Truncated importance sampling (train_pass.importance_sampling_cap): each completion token's gradient
        # weighted by min(pi / pi_sampler, cap), detached (`_against_the_sampler`); None: unweighted.
        self.importance_sampling_cap = options.importance_sampling_cap
        if options.importance_sampling_cap is not None:
            self._check_importance_sampling(options.importance_sampling_cap)
        self._loss_inputs: dict[str, Any] | None = None  # the batch of the loss call under way, read once
        self._mismatch: dict[str, torch.Tensor] | None = None  # sums over the loss calls of one compute_loss
        self.record_prompts = False  # train.RankProbe turns it on (diagnostics for several processes)
        self.prompts_seen: list[str] = []
        self.skip_zero_advantage = options.skip_zero_advantage and skipping_is_exact(self.args, self.aux_loss_enabled)
        if options.skip_zero_advantage and not self.skip_zero_advantage:
            log.info(
                "training on every completion: skipping zero-advantage rows is exact only with beta=0, no entropy "
                "bonus, top_entropy_quantile=1, no router auxiliary loss, steps_per_generation=1 and loss_type in %s",
                _TOKEN_NORMALISED_LOSSES,
            )

    def _check_temperature_reaches_the_loss(self) -> None:
        """rollout.final_temperature only where the sampler and every log-probability pass can follow it."""
        if self.use_vllm:
            raise ValueError(
                "rollout.final_temperature: vLLM samples at the temperature it was started with, so its rollouts "
                "and the loss would disagree; leave final_temperature out, or set grpo.use_vllm: false"
            )
        for model in (base_model(self.model), self.ref_model):
            if model is not None and not set_fused_head_temperature(model, self.temperature):
                raise ValueError(
                    "rollout.final_temperature: TRL's LM head on this model cannot be found to follow the schedule, "
                    "so the loss would score the policy at grpo.temperature; leave final_temperature out"
                )

    def _check_importance_sampling(self, cap: float) -> None:
        """train_pass.importance_sampling_cap only where grpokit's sampler returns its log-probabilities and
        the loss's ratio is not already taken against them."""
        key = f"train_pass.importance_sampling_cap={cap}"
        if not cap >= 1.0:
            raise ValueError(f"{key}: use a cap >= 1 (TIS uses 2), or leave it out")
        if self.use_vllm:
            raise ValueError(
                f"{key}: with vLLM, TRL corrects for its sampler itself; leave the cap out and set "
                "grpo.vllm_importance_sampling_mode: token_truncate, grpo.vllm_importance_sampling_clip_max: C"
            )
        if self.rollout_fallback is not None:
            raise ValueError(
                f"{key}: rollouts do not run on grpokit's sampler (grpokit's sampler "
                f"{self.rollout_fallback or 'was not chosen'}), so there are no sampler log-probabilities to weight "
                "by; leave the cap out"
            )
        if self.sampler_logprobs:
            raise ValueError(
                f"{key}: train_pass.sampler_logprobs already takes the loss's ratio against the sampler; "
                "choose one (leave the cap out, or set sampler_logprobs: false)"
            )

    def _sampler_logprobs_allowed(self) -> bool:
        """Whether the loss's ratio may be taken against the sampler's log-probabilities, one line if not."""
        if self.rollout_fallback is not None:  # with vLLM, TRL's vllm_importance_sampling_correction does this
            why = "rollouts do not run on grpokit's sampler, which returns them"
        elif self.args.gradient_accumulation_steps % (self.args.steps_per_generation * self.num_iterations):
            why = "TRL computes the policy's own old log-probabilities when a batch is reused (num_iterations > 1)"
        else:
            return True
        log.warning("train_pass.sampler_logprobs ignored: %s", why)
        return False

    def _shared_prefix_allowed(self) -> bool:
        """Whether the training pass may forward each prompt once (grpokit.kernels.prefix), with one log line if not."""
        why = prefix.refusal(self.model)
        if why is None and self.accelerator.num_processes > 1:
            why = "runs on several processes (DDP, ZeRO and FSDP hook the model's own forward)"
        if why:
            log.info("training pass: every completion row forwards its whole prompt (TRL's pass): the model %s", why)
        return why is None

    def _micro_batches_allowed(self) -> bool:
        """Whether the loss is a sum over rows, so that micro-batches' gradients add up to the batch's (and the
        out-of-memory back-off may switch them on): not with a term TRL averages within each call."""
        why = None
        if self.args.loss_type not in _TOKEN_NORMALISED_LOSSES:
            why = f"loss_type {self.args.loss_type!r} averages over the rows of a batch"
        elif getattr(self.args, "top_entropy_quantile", 1.0) < 1.0:
            why = "top_entropy_quantile < 1 ranks entropies across the whole batch"
        elif getattr(self, "_entropy_bonus_enabled", False) or self.aux_loss_enabled:
            # TRL adds each as a mean over the tokens of the call: once per micro-batch, not once per batch.
            why = "an entropy bonus (entropy_coef) or a router auxiliary loss is a mean over each micro-batch"
        elif self.accelerator.num_processes > 1 or self.is_deepspeed_enabled:
            why = "several processes (or DeepSpeed) own the backward pass"
        if why:
            log.info("train_pass.micro_batch_rows ignored: %s", why)
        return why is None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The loss in micro-batches of whole groups (train_pass.micro_batch_rows): each but the last is
        back-propagated here, so only one micro-batch's activations exist at a time. With a token-normalised
        loss (its normaliser, `num_items_in_batch`, counts the whole batch) the summed gradient is the
        batch's. The returned value is the batch's loss; only its last part carries a gradient. Each part
        is as wide as its own longest completion (`trim_completions`)."""
        self._mismatch = {} if self.model.training else None
        try:
            loss = self._loss_in_parts(model, inputs, return_outputs, num_items_in_batch)
        finally:
            measured, self._mismatch = self._mismatch, None
        if measured:
            self._log_mismatch(measured)
        return loss

    def _loss_in_parts(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        rows = inputs["completion_ids"].size(0)
        if return_outputs or not self.micro_batch_rows or rows <= self.micro_batch_rows or not model.training:
            return super().compute_loss(model, trim_completions(inputs), return_outputs, num_items_in_batch)
        parts = micro_batches(inputs["prompt_ids"], inputs["prompt_mask"], self.micro_batch_rows)
        done = torch.zeros((), device=inputs["completion_ids"].device)
        for mask in parts[:-1]:
            loss = super().compute_loss(model, trim_completions(_select_rows(inputs, mask)))
            self.accelerator.backward(loss)
            done = done + loss.detach()
        return super().compute_loss(model, trim_completions(_select_rows(inputs, parts[-1]))) + done

    def _log_mismatch(self, measured: dict[str, torch.Tensor]) -> None:
        """Log what `_against_the_sampler` summed over one compute_loss call (all its micro-batches, all
        processes), under TRL's names for the same figures with vLLM: the mean and max |log pi - log
        pi_sampler| per completion token trained, and with the cap, the min, mean and max weight."""
        sums = self.accelerator.gather(torch.stack([measured["sum"], measured["tokens"]]).view(1, 2)).sum(dim=0)
        tokens = float(sums[1])
        if not tokens:
            return
        metrics = self._metrics["train"]
        metrics["sampling/sampling_logp_difference/mean"].append(float(sums[0]) / tokens)
        metrics["sampling/sampling_logp_difference/max"].append(float(self.accelerator.gather(measured["max"]).max()))
        if "weight_sum" in measured:
            weight_sum = float(self.accelerator.gather(measured["weight_sum"]).sum())
            metrics["sampling/importance_sampling_ratio/min"].append(
                float(self.accelerator.gather(measured["weight_min"]).min())
            )
            metrics["sampling/importance_sampling_ratio/mean"].append(weight_sum / tokens)
            metrics["sampling/importance_sampling_ratio/max"].append(
                float(self.accelerator.gather(measured["weight_max"]).max())
            )

    def _against_the_sampler(self, logps: torch.Tensor, inputs: dict[str, Any]) -> torch.Tensor:
        """The policy's per-token log-probabilities [B, C] of one loss call, measured against the sampler's
        (`sampling_per_token_logps`: grpokit's sampler, possibly on a bf16 merged copy of the policy) and,
        with `importance_sampling_cap`, weighted by it.

        The policy at rollout is TRL's `old_per_token_logps` where TRL computed them (a batch reused), else
        the log-probabilities just computed (the same weights). Tokens the sampler did not draw (a guide's
        demonstration: NaN) are not measured and get a weight of 1.

        The weight w = min(exp(log pi_rollout - log pi_sampler), cap), detached, enters as
        `logps.detach() + w * (logps - logps.detach())`: the same values, so the loss and every logged figure
        are unchanged, and each token's gradient multiplied by w. TRL's token losses read a token's
        log-probability only at that token (a ratio exp(logps - old), or logps itself with cispo), so this
        is TIS's per-token weight on the loss term, in any micro-batch and either training pass; a KL term
        (beta > 0) is weighted with it."""
        sampled = inputs["sampling_per_token_logps"]  # [B, C]
        old = inputs.get("old_per_token_logps")
        if self.sampler_logprobs:  # old is the sampler's own (the ratio's): fill what it did not draw
            if old is not None and torch.isnan(old).any():
                inputs["old_per_token_logps"] = torch.where(torch.isnan(old), logps.detach(), old)
            old = None
        policy = logps.detach() if old is None else old
        mask = inputs["completion_mask"]  # [B, C]
        if "tool_mask" in inputs:  # tool output: neither drawn nor trained
            mask = mask * inputs["tool_mask"]
        diff = (policy - sampled).float()  # [B, C] log pi - log pi_sampler
        drawn = mask.bool() & ~torch.isnan(diff)
        diff = torch.where(drawn, diff, torch.zeros_like(diff))
        measured = self._mismatch
        if measured is not None:
            add = {"sum": diff.abs().sum().double(), "tokens": drawn.sum().double()}
            for key, value in add.items():
                measured[key] = measured.get(key, 0) + value
            peak = diff.abs().max() if diff.numel() else diff.new_zeros(())
            measured["max"] = torch.maximum(measured["max"], peak) if "max" in measured else peak
        if self.importance_sampling_cap is None:
            return logps
        weight = diff.exp().clamp(max=self.importance_sampling_cap).to(logps.dtype)  # [B, C], 1 where not drawn
        if measured is not None:
            measured["weight_sum"] = measured.get("weight_sum", 0) + (weight.double() * drawn).sum()
            low = weight.masked_fill(~drawn, float("inf")).min() if weight.numel() else weight.new_full((), 1.0)
            high = weight.masked_fill(~drawn, 0.0).max() if weight.numel() else weight.new_full((), 1.0)
            measured["weight_min"] = torch.minimum(measured["weight_min"], low) if "weight_min" in measured else low
            measured["weight_max"] = torch.maximum(measured["weight_max"], high) if "weight_max" in measured else high
        detached = logps.detach()
        return detached + weight * (logps - detached)

    def _prepare_inputs(self, generation_batch: Any) -> Any:
        """TRL's (rollouts, rewards, advantages), kept so that a training pass that ran out of memory runs
        again on the same rows; on that retry, those rows instead of new rollouts."""
        if self._pass_retry is not None:
            self._pass_inputs, self._pass_retry = self._pass_retry, None
        else:
            self._pass_inputs = super()._prepare_inputs(generation_batch)
        # What the step logged so far (the rollout's figures): a failed pass's own figures are cut back to it.
        self._logged_before_pass = {key: len(values) for key, values in self._metrics["train"].items()}
        return self._pass_inputs

    def training_step(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """TRL's step. When its training pass runs out of GPU memory, the pass runs again on the same rows in
        micro-batches of half as many rows (the same gradient; `compute_loss`), halving until it fits, and
        keeps that size for the rest of the run. Out of memory anywhere else (rollouts, rewards), or where
        micro-batches would not give the same gradient, the error names the recipe settings that help."""
        while True:
            self._pass_inputs = None
            try:
                loss = super().training_step(*args, **kwargs)
                break
            except torch.OutOfMemoryError as err:  # what to change in the recipe, not only the allocator's numbers
                inputs, self._pass_inputs = self._pass_inputs, None
                smaller = self._smaller_micro_batch(inputs)
                if smaller is None:
                    raise torch.OutOfMemoryError(f"{err}\n\n{self._out_of_memory_advice()}") from err
                first_line = str(err).splitlines()[0] if str(err) else "out of memory"
                for key, values in self._metrics["train"].items():  # the failed pass's entropy, clip ratios, ...
                    del values[self._logged_before_pass.get(key, 0) :]
            # Outside the handler: the traceback's frames, which hold the failed pass's activations, are gone.
            self.model.zero_grad(set_to_none=True)  # the failed attempt's partial gradient (no accumulation running)
            memory.release_device_cache()
            log.warning(
                "training pass out of GPU memory on %d rows at a time (%s): running it again in micro-batches of "
                "%d rows, and from now on (the same gradient; `train_pass.micro_batch_rows: %d` starts there)",
                self.micro_batch_rows or inputs["completion_ids"].size(0),
                first_line,
                smaller,
                smaller,
            )
            self.micro_batch_rows, self._pass_retry = smaller, inputs
        self._pass_inputs = None  # TRL's buffer holds the rows as long as they are needed
        casts.clear()  # the pass's casts kept for reuse (the LM head's weight, the last adapted layer's input)
        memory.trim()  # the training pass's freed activations leave before the next rollout
        return loss

    def _smaller_micro_batch(self, inputs: dict[str, Any] | None) -> int | None:
        """Half the training pass's rows at a time, or None where a smaller micro-batch cannot help: the rows
        were never prepared (out of memory in the rollout or the rewards), gradients of earlier accumulation
        steps are in the parameters (a retry could not take back its own), one row at a time already, or the
        loss is not a sum over rows."""
        if inputs is None or self._step % self.current_gradient_accumulation_steps:
            return None
        now = self.micro_batch_rows or inputs["completion_ids"].size(0)
        if now <= 1 or not self._micro_batches_allowed():
            return None
        return now // 2

    def _out_of_memory_advice(self) -> str:
        """The recipe settings that lower a GRPO step's peak memory, from the one that costs least time."""
        rows, group = self.args.per_device_train_batch_size, self.num_generations
        now = self.micro_batch_rows
        how = f"in micro-batches of {now} rows" if now else "on all at once"
        advice = [
            f"grpokit: a GRPO step ran out of GPU memory ({rows} completion rows a step on this process, "
            f"the training pass {how})."
        ]
        smaller = (now or rows) // 2
        if smaller and self._micro_batches_allowed():
            advice.append(
                f"- `train_pass.micro_batch_rows: {smaller}`: the loss and its backward on that many rows at a time "
                f"(groups of {group} kept whole where they fit): the same gradient, one micro-batch's activations "
                "at a time."
            )
        advice.append(
            "- `grpo.gradient_checkpointing: true`: activations recomputed in the backward (TRL's pass, without "
            "grpokit's shared prefix): less memory for somewhat more time."
        )
        advice.append(
            "- fewer rows or tokens: `grpo.per_device_train_batch_size` with `grpo.gradient_accumulation_steps`, "
            "or a shorter `grpo.max_completion_length`."
        )
        advice.append(
            "Checkpoints already saved are kept: with either of the first two changed, `grpokit train RECIPE --resume` "
            "continues this run (they change how a step is computed, not what); the last starts a new one."
        )
        return "\n".join(advice)

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **multimodal,
    ):
        """TRL's per-token log-probabilities (or grpokit.kernels.prefix's shared-prefix pass, the same values); in
        the loss, measured against the sampler's and weighted by them (`_against_the_sampler`)."""
        # The batch of the loss call under way, for its policy pass only (the first call in the loss).
        inputs, self._loss_inputs = self._loss_inputs, None
        if not self.shared_prefix or compute_aux_loss or any(v is not None for v in multimodal.values()):
            logps, entropies, aux = super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **multimodal,
            )
            return (logps if inputs is None else self._against_the_sampler(logps, inputs)), entropies, aux
        logps, entropies = prefix.logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            temperature=self.temperature,
            compute_entropy=compute_entropy,
            batch_size=batch_size,
            autocast=self.accelerator.autocast,
            lm_head_fp32=self.args.cast_lm_head_to_fp32,
        )
        return (logps if inputs is None else self._against_the_sampler(logps, inputs)), entropies, None

    def _tokenize_prompts(self, prompts: list) -> tuple[Any, Any, Any]:
        if is_conversational({"prompt": prompts[0]}):
            return super()._tokenize_prompts(prompts)
        # grpokit's prompts are rendered text; TRL would add special tokens (a second BOS after the template's)
        return tokenize_prompts(self.processing_class, prompts), None, {}

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if self._ahead is not None:  # rolled out with other rows beforehand (_score_together)
            drawn = self._ahead.take(prompt_ids)
        else:
            settings = self._rollout_settings(images, multimodal_fields)
            if settings is None:  # vLLM, images, tools or a generation setting grpokit's sampler does not have
                return super()._generate_single_turn(
                    prompt_ids, images, multimodal_fields, num_generations, has_tool_images
                )
            drawn = self._sample(prompt_ids, settings)
        ids, logps = drawn if self._wants_sampler_logps else (drawn, None)
        for row, demonstration in self._guided.items():  # guidance: the demonstration instead of this row's draw
            ids[row] = list(demonstration)
            if logps is not None:  # not drawn by the sampler: no log-probability (TRL's marker, NaN)
                logps[row] = [float("nan")] * len(demonstration)
        # TRL pads the log-probabilities into the batch as `sampling_per_token_logps` (see `_score`).
        return ids, logps

    @property
    def _wants_sampler_logps(self) -> bool:
        """Whether grpokit's sampler returns its log-probabilities: for the loss's ratio (sampler_logprobs), and
        in training always, so that the loss measures (and may correct) the sampler/policy mismatch."""
        return self.sampler_logprobs or self.model.training

    def _sample(self, prompt_ids: list[list[int]], settings: SamplingSettings) -> Any:
        """grpokit's sampler on the policy (or its merged rollout copy): the completions' ids, with their
        log-probabilities when `_wants_sampler_logps`."""
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
            # The training pass's precision for the rollout's matmuls too (bf16 when grpo.bf16 is on).
            with torch.autocast(self.accelerator.device.type, dtype=torch.bfloat16, enabled=autocast):
                return sample(
                    model,
                    prompt_ids,
                    settings,
                    eos_ids=self._eos_ids(),
                    pad_id=self._tokenizer.pad_token_id,
                    tokenizer=self._tokenizer,
                    logprobs=self._wants_sampler_logps,
                    stats=self._sampled_entropy if self.model.training else None,
                )

    def _score_together(self, parts: list[tuple[list[dict[str, Any]], Callable[[list[dict[str, Any]]], Any]]]) -> list:
        """Each part's rows rolled out in one call of the sampler, then scored on its own by its function
        (`_score`, `_score_aside`, ...), in order: one decode instead of one per part, whose time per row falls
        with the rows decoded at once. One rollout per part where grpokit's sampler does not draw them."""
        parts = [(rows, score) for rows, score in parts if rows]
        ahead = len(parts) > 1 and self.rollout_fallback is None and not self.tools and not self.environment_factories
        if ahead:
            prompts = [row["prompt"] for rows, _ in parts for row in rows]
            prompt_ids, images, fields = self._tokenize_prompts(copy.deepcopy(prompts))
            settings = self._rollout_settings(images, fields)
            if settings is not None:
                self._ahead = _DrawnAhead(prompt_ids, self._sample(prompt_ids, settings), self._wants_sampler_logps)
        try:
            return [score(rows) for rows, score in parts]
        finally:
            self._ahead = None

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

    def _rollout_fallback(self) -> str | None:
        """Why this run cannot sample on grpokit's sampler ("" when the recipe chose TRL's or vLLM), else None."""
        if self.rollout_engine != "grpokit" or self.use_vllm:
            return ""
        if getattr(self, "tools", None) or self.environment_factories is not None:
            return "does not call tools"
        if self.use_transformers_continuous_batching:
            return "is not continuous batching, which the recipe asked for"
        unsupported = unsupported_settings(self.generation_config)
        if unsupported:
            return f"does not implement the generation settings {', '.join(unsupported)}"
        return None

    def _rollout_settings(self, images: Any, multimodal_fields: Any) -> SamplingSettings | None:
        if self.rollout_fallback is not None or (images is not None and any(images)) or multimodal_fields:
            return None
        config = self.generation_config
        return SamplingSettings(
            max_new_tokens=config.max_new_tokens,
            temperature=config.temperature or 1.0,
            top_k=(config.top_k or 0) if config.do_sample else 1,  # do_sample=False: greedy
            top_p=config.top_p if config.top_p is not None else 1.0,
            min_new_tokens=config.min_new_tokens or 0,
            stop_texts=self.stop_texts,
        )

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)  # [B, F]
        # TRL drops a None from the sum and scores the rest: a sample whose verifier failed would compete on
        # its format reward alone. One failed grpokit reward makes the whole sample unscorable (NaN), which
        # TRL leaves out of the group's mean and std and gives an advantage of 0.
        excluding = [i for i, f in enumerate(self.reward_funcs) if getattr(f, "excludes_failures", False)]
        if excluding:
            failed = torch.isnan(rewards_per_func[:, excluding]).any(dim=1)
            rewards_per_func[failed] = torch.nan
        if self.retry and self.retry_reward in self.reward_func_names:
            self._row_success = rewards_per_func[:, self.reward_func_names.index(self.retry_reward)].clone()
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        summed = (rewards_per_func * weights).nansum(dim=1)  # [B] TRL's summed reward (sum_then_normalize)
        summed[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        # What decides whether a group is uniform (`_score`): the reward TRL normalises per group, or with
        # normalize_then_sum each reward apart (each is normalised within its group first).
        per_func = self.multi_objective_aggregation == "normalize_then_sum"
        self._decided_rewards = (rewards_per_func * weights if per_func else summed.unsqueeze(1)).clone()  # [B, K]
        if self.downsample_to:  # down-sampling selects on the summed reward
            self._row_rewards = summed
        mode = "train" if self.model.training else "eval"
        for name, share in groups_all_failing(rewards_per_func, self.num_generations, self.reward_func_names).items():
            self._metrics[mode][f"rewards/{name}/groups_all_fail"].append(share)
        return rewards_per_func

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        folder = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
        # Free space checked first; a full disk mid-write removes the unfinished folder and says how to resume.
        needed = disk.checkpoint_bytes(self.model, self.optimizer, folder.parent)
        with disk.saving(folder, needed, f"GRPO {folder.name}"):
            super()._save_checkpoint(model, trial)
        if self.args.should_save:  # the main process marks the checkpoint complete, last
            (folder / SCHEDULES_FILE).write_text(json.dumps(self._schedule_state()), encoding="utf-8")
            mark_complete(folder, self.state.global_step)

    def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        saved = Path(str(resume_from_checkpoint)) / SCHEDULES_FILE if resume_from_checkpoint else None
        if saved is not None and saved.is_file():  # the curriculum level and weights the run had reached
            self._load_schedule_state(json.loads(saved.read_text(encoding="utf-8")))
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _schedule_temperature(self) -> None:
        """This step's sampling temperature (rollout.final_temperature): grpo.temperature until step
        `first`, then linearly to the final one at step `last`, then the final one. The sampler and the loss
        read the same value (TRL scales the policy's logits by it), set once per rollout, so a batch trained
        again (num_iterations > 1) keeps the temperature it was drawn at. A function of the step alone: a
        resumed run continues it."""
        final, first, last = self.temperature_schedule
        done = min(1.0, max(0.0, (self.state.global_step - first) / max(1, last - first)))
        start = self.args.temperature
        self.temperature = start + (final - start) * done
        self.generation_config.temperature = self.temperature
        # TRL's pass (shared_prefix off, gradient checkpointing, several processes, scaled logits) divides by
        # the temperature its fused LM head was built with: that head follows the schedule too.
        for model in (base_model(self.model), self.ref_model):
            if model is not None and not set_fused_head_temperature(model, self.temperature):
                raise RuntimeError("rollout.final_temperature: TRL's LM head was replaced since start-up (a bug)")
        self._metrics["train"]["temperature"].append(self.temperature)

    def _schedule_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        if self.micro_batch_rows != self._recipe_micro_batch_rows:  # backed off after running out of GPU memory
            state["micro_batch_rows"] = {"recipe": self._recipe_micro_batch_rows, "learned": self.micro_batch_rows}
        if self.curriculum is not None:
            state["curriculum"] = {"level": self.curriculum.level, "rates": list(self.curriculum.rate.values)}
        if self.adaptive is not None:
            rates = {name: list(r.values) for name, r in self.adaptive.rates.items()}
            state["adaptive"] = {"weights": self.adaptive.weights, "rates": rates}
            state["reward_weights"] = self.reward_weights.tolist()
        if self.replay is not None:
            try:  # dataset rows: JSON for the tasks grpokit ships; a row of other types starts the queue empty
                state["replay"] = json.loads(json.dumps(self.replay.state()))
            except (TypeError, ValueError):
                log.warning("dynamic_sampling.replay: prompts not JSON-serialisable, the queue is not checkpointed")
        return state

    def _load_schedule_state(self, state: dict[str, Any]) -> None:
        saved = state.get("micro_batch_rows")
        if saved and saved["recipe"] == self._recipe_micro_batch_rows and self._micro_batches_allowed():
            # The size the run backed off to: a resumed run does not run out of memory again to find it.
            self.micro_batch_rows = saved["learned"]
            log.info(
                "training pass in micro-batches of %d rows, as the run had learned after running out of GPU memory",
                self.micro_batch_rows,
            )
        elif saved:  # the recipe's train_pass.micro_batch_rows changed since: the user's new setting stands
            log.info(
                "train_pass.micro_batch_rows changed since the checkpoint: %s rows at a time, not the %d "
                "learned after running out of GPU memory",
                self.micro_batch_rows or "all",
                saved["learned"],
            )
        if self.curriculum is not None and "curriculum" in state:
            self.curriculum.level = state["curriculum"]["level"]
            self.curriculum.rate.values.extend(state["curriculum"]["rates"])
        if self.adaptive is not None and "adaptive" in state:
            self.adaptive.weights.update(state["adaptive"]["weights"])
            for name, values in state["adaptive"]["rates"].items():
                self.adaptive.rates[name].values.extend(values)
            self.reward_weights = torch.tensor(state["reward_weights"], dtype=self.reward_weights.dtype)
        if self.replay is not None and "replay" in state:
            self.replay.load(state["replay"])

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        """TRL's rollout and scoring, with grpokit's schedules, then the rows that carry a gradient. Logs
        `entropy` over every row drawn this step (batch, extra rounds, retries), so that it measures the
        policy, not the informative minority the skip keeps (the entropy-collapse warning reads it)."""
        training = self.model.training
        self._sampled_entropy = {} if training else None
        try:
            return self._generate_and_select(inputs, training)
        finally:
            drawn, self._sampled_entropy = self._sampled_entropy, None
            if training:
                self._entropy_of_sampled_rows = bool(drawn and drawn.get("tokens"))
            if training and self._entropy_of_sampled_rows:
                self._metrics["train"]["entropy"].append(drawn["entropy_sum"] / drawn["tokens"])

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        """TRL's loss; its logged entropy (over the rows trained) moves to `entropy/trained` where `entropy`
        holds the step's sampled rows' (rollouts on grpokit's sampler)."""
        metrics = self._metrics["train" if self.model.training else "eval"]
        before = len(metrics.get("entropy", ()))
        measures = self.model.training and not self.use_vllm and inputs.get("sampling_per_token_logps") is not None
        self._loss_inputs = inputs if measures else None  # TRL's vLLM path measures and corrects on its own
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self._loss_inputs = None
        if self.model.training and self._entropy_of_sampled_rows and len(metrics["entropy"]) > before:
            metrics["entropy/trained"].extend(metrics["entropy"][before:])
            del metrics["entropy"][before:]
        return loss

    def _generate_and_select(self, inputs: Any, training: bool) -> dict[str, Any]:
        if training and self.temperature_schedule is not None:
            self._schedule_temperature()
        if training and self.curriculum is not None and self.curriculum.level > 0:
            # The sampler's prompts come from level 0: each group gets one of the current level instead.
            seed = f"curriculum:{self.args.seed}:{self.state.global_step}"
            inputs = extra_prompt_rows(
                self.level_data[self.curriculum.level], len(inputs) // self.num_generations, self.num_generations, seed
            )
        extra = self._upfront_rows(inputs) if training else []
        batch = self._score(inputs + extra)
        row_success, drawn = self._row_success, None
        if extra:  # the batch's own rows first, then the extra round's
            group = self.num_generations
            own = torch.arange((len(inputs) + len(extra)) // group) < len(inputs) // group  # [groups]
            own = own.repeat_interleave(self._group_rows)  # [rows scored]
            theirs = None if row_success is None else row_success[~own]
            row_success = None if row_success is None else row_success[own]
            batch, drawn = _select_rows(batch, own), (extra, _select_rows(batch, ~own), theirs)
        if training:
            success = self._success_rates()
            if self.dynamic_max_extra is not None:
                batch = self._fill_with_informative_groups(inputs, batch, row_success, drawn)
            self._step_schedules(success)
        if self.rollout_copy is not None:
            self.rollout_copy.release()  # its weights' memory serves the training pass; the next rollout rewrites them
        memory.trim()  # the rollout's freed caches leave before the training pass's activations arrive
        if not (self.skip_zero_advantage and training):
            return batch
        mask = keep_mask(batch, self._group_rows)
        if self.accelerator.num_processes > 1:
            # TRL gathers per-row tensors across ranks in its loss (clip ratios): every rank must keep the
            # same number of rows. Ranks with fewer informative rows keep extra zero-advantage rows,
            # whose gradient is exactly zero.
            count = torch.tensor([int(mask.sum())], device=mask.device)
            mask = pad_mask(mask, int(self.accelerator.gather(count).max()))
        kept = int(mask.sum())
        self._metrics["train"]["rows_trained_frac"].append(kept / mask.numel())
        return batch if kept == mask.numel() else trim_completions(_select_rows(batch, mask))

    def _score(self, inputs: Any) -> dict[str, Any]:
        """Roll out and score `inputs` (TRL), then grpokit's accounting of truncation and reward errors."""
        if self.record_prompts:
            self.prompts_seen.extend(str(x.get("prompt", "")) for x in inputs if isinstance(x, dict))
        batch = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        self._zero_uniform_groups(batch, mode)
        sampled = batch.get("sampling_per_token_logps")
        if mode == "train" and self.sampler_logprobs and sampled is not None and "old_per_token_logps" not in batch:
            # The PPO ratio against the model that drew the tokens: pi_theta / pi_sampler, clipped to
            # [1 - epsilon, 1 + epsilon_high], instead of pi_theta over itself (1, whatever the sampler was).
            batch["old_per_token_logps"] = sampled
        self._account_truncation(batch, mode)
        for func in self.reward_funcs:
            if hasattr(func, "errors"):  # grpokit's adapter: failures since the last batch
                self._metrics[mode][f"rewards/{func.__name__}/errors"].append(float(func.errors))
                func.errors = 0
        if mode == "train" and self.downsample_to:
            batch = self._downsample(batch)
        return batch

    def _zero_uniform_groups(self, batch: dict[str, Any], mode: str) -> None:
        """The batch's rewards (`rewards`, [B, K]: what decides uniform groups downstream) and exactly zero
        advantage for every row of a group whose rewards are all equal (`schedules.uniform_groups`): TRL's
        float rounding leaves such rows a small advantage of one sign (eight rewards of 0.8333: -6e-4 each),
        which would keep the group in training, out of retries and dynamic sampling's count, and out of
        `frac_reward_zero_std` (logged here as the share of uniform groups, which the health warning reads)."""
        group = self.num_generations if mode == "train" else self.num_generations_eval
        rewards, self._decided_rewards = self._decided_rewards, None
        if rewards is None:
            return
        advantages = batch["advantages"]
        start = self.accelerator.process_index * advantages.numel()
        uniform = uniform_groups(rewards, group)  # [all processes' groups]
        rows = uniform.repeat_interleave(group)[start : start + advantages.numel()].to(advantages.device)  # [B]
        batch["advantages"] = advantages.masked_fill(rows, 0.0)
        batch["rewards"] = rewards[start : start + advantages.numel()].to(advantages.device)
        if self._metrics[mode].get("frac_reward_zero_std"):
            self._metrics[mode]["frac_reward_zero_std"][-1] = uniform.float().mean().item()

    @property
    def _group_rows(self) -> int:
        """Rows per group in a scored training batch: downsample_to, else every row drawn."""
        return self.downsample_to or self.num_generations

    def _downsample(self, batch: dict[str, Any]) -> dict[str, Any]:
        """`batch` (groups of num_generations rows) -> the `downsample_to` rows of each group whose summed
        rewards vary most, with advantages over those rows (TRL's formula); logs the mean within-group reward
        standard deviation drawn and kept."""
        keep, rewards = self.downsample_to, self._row_rewards
        mask = max_variance_rows(rewards, self.num_generations, keep)  # [B]
        out = _select_rows(batch, mask.to(batch["advantages"].device))
        out["advantages"] = group_advantages(rewards[mask], keep, self.scale_rewards).to(batch["advantages"].device)
        out["num_items_in_batch"] = out["completion_mask"].sum()  # the loss's normaliser: the rows that train
        if self._row_success is not None:
            self._row_success = self._row_success[mask]
        metrics = self._metrics["train"]
        for name, values, group in (("drawn", rewards, self.num_generations), ("kept", rewards[mask], keep)):
            spread = torch.nan_to_num(values.view(-1, group).std(dim=1), nan=0.0).mean()
            metrics[f"downsample/reward_std_{name}"].append(float(spread))
        return out

    def _success_rates(self) -> dict[str, float]:
        """Each reward's mean over the batch just scored (TRL's rewards/<name>/mean)."""
        metrics = self._metrics["train"]
        return {
            name: metrics[f"rewards/{name}/mean"][-1]
            for name in self.reward_func_names
            if metrics.get(f"rewards/{name}/mean")
        }

    def _prompt_data(self) -> Any:
        """The prompts extra rounds draw from: the curriculum's current level, else the training set."""
        return self.level_data[self.curriculum.level] if self.curriculum is not None else self.train_dataset

    def _upfront_rows(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The first extra round's prompt rows when it is drawn with the batch (dynamic_sampling.upfront): the
        prompts that round would draw after the batch's, the same seed."""
        group = self.num_generations
        size = len(inputs) // group
        groups = min(size, round(self.dynamic_max_extra * size)) if self.upfront else 0
        if groups < 1:
            return []
        seed = f"dynamic:{self.args.seed}:{self.state.global_step}:1"
        return extra_prompt_rows(self._prompt_data(), groups, group, seed)

    def _fill_with_informative_groups(
        self,
        inputs: list[dict[str, Any]],
        batch: dict[str, Any],
        row_success: torch.Tensor | None,
        drawn: tuple[list[dict[str, Any]], dict[str, Any], torch.Tensor | None] | None = None,
    ) -> dict[str, Any]:
        """The batch refilled with informative groups (`dynamic_sampling.DynamicSampling`). `row_success`: the
        batch's success reward per row (for retry); `drawn`: the first extra round's rows, scored batch and
        success, already rolled out with the batch (upfront)."""
        return DynamicSampling(self, inputs, batch, row_success, drawn).fill()

    def _eos_ids(self) -> list[int]:
        """The ids that end a rollout: the generation config's, else TRL's."""
        return _as_ids(self.generation_config.eos_token_id) or self.eos_token_ids

    def _demonstration_ids(self, row: dict[str, Any]) -> list[int]:
        """`guide(row)` as completion token ids, ended as a sampled row would be: on a stop text, else EOS;
        at most max_completion_length tokens."""
        text = self.guide(row)
        ids = self._tokenizer(text, add_special_tokens=False)["input_ids"]
        if not any(text.rstrip().endswith(stop) for stop in self.stop_texts):
            ids.append(self._eos_ids()[0])
        return ids[: self.max_completion_length]

    def _score_aside(self, inputs: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
        """`_score`, its logged figures moved under `prefix` (`replay/`, `retry/`): the run's own figures
        (reward means, frac_reward_zero_std, which the run-health warnings read) stay those of prompts drawn
        as new. Reward error counts stay where they are: a failed verifier is reported wherever it failed."""
        metrics = self._metrics["train"]
        before = {key: len(values) for key, values in metrics.items()}
        scored = self._score(inputs)
        # What this scoring logged, found before anything moves (a second round in one step must not move
        # the first round's figures again, to `replay/replay/...`).
        added = {
            key: values[before.get(key, 0) :]
            for key, values in metrics.items()
            if len(values) > before.get(key, 0) and not key.endswith("/errors")
        }
        for key, values in added.items():
            del metrics[key][before.get(key, 0) :]
            if not metrics[key]:
                del metrics[key]
            metrics[f"{prefix}{key}"].extend(values)
        return scored

    def _step_schedules(self, success: dict[str, float]) -> None:
        if self.curriculum is not None and self.success_reward in success:
            before = self.curriculum.level
            level = self.curriculum.update(success[self.success_reward])
            if level != before:
                if self.replay is not None:
                    self.replay.clear()  # the previous level's prompts
                log.info(
                    "curriculum: %s success %.2f over %d steps: %s = %s from step %d",
                    self.success_reward,
                    self.curriculum.threshold,
                    self.curriculum.window,
                    self.curriculum.param,
                    self.curriculum.value,
                    self.state.global_step + 1,
                )
            self._metrics["train"]["curriculum/level"].append(float(level))
        if self.adaptive is not None:
            weights = self.adaptive.update(success)
            self.reward_weights = torch.tensor(
                [
                    weights.get(name, float(w))
                    for name, w in zip(self.reward_func_names, self.reward_weights.tolist(), strict=True)
                ],
                dtype=self.reward_weights.dtype,
            )
            for name, weight in weights.items():
                self._metrics["train"][f"weights/{name}"].append(weight)

    def _account_truncation(self, batch: dict[str, Any], mode: str) -> None:
        """Rows that ran out of tokens (neither an EOS nor a stop text at their end): TRL's clipped ratio
        counted stop-text endings as truncated, and `mask_truncated_completions` masks only true ones."""
        ids, mask = batch["completion_ids"], batch["completion_mask"]  # [B, C]
        rows = [row[m.bool()].tolist() for row, m in zip(ids.cpu(), mask.cpu(), strict=True)]
        truncated = torch.tensor(
            [not finished(r, self.eos_token_ids, self._tokenizer, self.stop_texts) for r in rows], device=ids.device
        )
        self._metrics[mode]["completions/clipped_ratio"][-1] = self.accelerator.gather(truncated).float().mean().item()
        if self.mask_truncated_rows and truncated.any():
            removed = (mask * truncated.unsqueeze(1)).sum()
            batch["completion_mask"] = mask * (~truncated).unsqueeze(1).to(mask.dtype)
            batch["num_items_in_batch"] = batch["num_items_in_batch"] - self.accelerator.gather(removed).sum()


def groups_all_failing(rewards: torch.Tensor, group: int, names: list[str]) -> dict[str, float]:
    """[B, F] rewards (groups of `group` rows in a row) -> each reward's share of groups in which no
    completion scored above 0 (unscorable rows count as failing). Groups that agree in failure are what a
    collapse leaves; groups that agree in success are what learning leaves.

    >>> groups_all_failing(torch.tensor([[0.0], [0.0], [1.0], [0.0]]), 2, ["correctness"])
    {'correctness': 0.5}
    """
    if rewards.numel() == 0 or rewards.size(0) % group:
        return {}
    passed = torch.nan_to_num(rewards, nan=0.0).view(-1, group, rewards.size(1)) > 0  # [groups, G, F]
    shares = (~passed.any(dim=1)).float().mean(dim=0)
    return {name: float(share) for name, share in zip(names, shares.tolist(), strict=True)}


def set_fused_head_temperature(model: Any, temperature: float) -> bool:
    """Make TRL's fused LM head on `model` (`trl.trainer.utils.add_fused_lm_head`, a forward that closes
    over the temperature it was built with) divide the logits by `temperature` from now on; whether one
    was found. Its forward is found as `model.forward`, or inside a wrapper of it (accelerate's autocast
    keeps the one it wraps)."""
    found, seen = False, set()
    stack = [model.__dict__.get("forward"), model.__dict__.get("_original_forward")]
    while stack:
        fn = stack.pop()
        fn = getattr(fn, "__func__", fn)
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
        if code is not None and code.co_name == "_fused_forward" and "temperature" in code.co_freevars:
            cells[code.co_freevars.index("temperature")].cell_contents = float(temperature)
            found = True
            continue
        stack.append(getattr(fn, "__wrapped__", None))
        for cell in cells:  # a wrapper's closure holds the function it wraps
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if callable(value):
                stack.append(value)
    return found


def _as_ids(value: int | list[int] | None) -> list[int]:
    return [] if value is None else [value] if isinstance(value, int) else list(value)


def skipping_is_exact(args: Any, router_aux_loss: bool = False) -> bool:
    """Whether dropping zero-advantage rows leaves the loss and its gradient unchanged. Not with terms that
    read every row: a KL term or entropy bonus, an entropy quantile (taken over all rows, so dropping rows
    changes which tokens train), or a MoE router's load-balancing loss (over every token's routing)."""
    return (
        args.beta == 0.0
        and args.loss_type in _TOKEN_NORMALISED_LOSSES
        and getattr(args, "entropy_coef", 0.0) == 0.0
        and not getattr(args, "use_adaptive_entropy", False)
        and getattr(args, "top_entropy_quantile", 1.0) >= 1.0
        and not router_aux_loss
        and args.steps_per_generation == 1
    )


def keep_mask(batch: dict[str, Any], group: int | None = None) -> torch.Tensor:
    """Rows of groups whose rewards differ (`batch_rewards`, groups of `group` rows; every group when
    `group` is None) that have a non-zero advantage; at least one row, so the step still has an input (its
    gradient is 0).

    >>> keep_mask({"advantages": torch.tensor([-6e-4, -6e-4, 1.0, -1.0]), "rewards": torch.tensor([0.8, 0.8, 1, 0])}, 2)
    tensor([False, False,  True,  True])
    """
    mask = batch["advantages"] != 0  # [B]
    if group is not None:
        mask = mask & informative_groups(batch_rewards(batch), group).repeat_interleave(group).to(mask.device)
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


def micro_batches(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, rows: int) -> list[torch.Tensor]:
    """Row masks of micro-batches of at most `rows` rows, each group (the rows of one prompt, wherever they
    sit in the batch: TRL shuffles it) kept whole where it fits, so the shared-prefix pass forwards each
    prompt once per micro-batch.

    >>> ids = torch.tensor([[1], [1], [1], [2], [2], [3], [3], [3]])
    >>> [m.nonzero().squeeze(1).tolist() for m in micro_batches(ids, torch.ones_like(ids), 4)]
    [[0, 1, 2], [3, 4], [5, 6, 7]]
    >>> ids = torch.tensor([[1], [2], [1], [2]])
    >>> [m.nonzero().squeeze(1).tolist() for m in micro_batches(ids, torch.ones_like(ids), 2)]
    [[0, 2], [1, 3]]
    """
    _, group = prefix.prompt_groups(prompt_ids, prompt_mask)  # [B]
    members = [(group == g).nonzero().squeeze(1).tolist() for g in range(int(group.max()) + 1)]
    parts: list[list[int]] = []
    current: list[int] = []
    for rows_of_group in members:
        while len(rows_of_group) > rows:  # a group larger than a micro-batch is split
            if current:
                parts.append(current)
                current = []
            parts.append(rows_of_group[:rows])
            rows_of_group = rows_of_group[rows:]
        if len(current) + len(rows_of_group) > rows:
            parts.append(current)
            current = []
        current += rows_of_group
    if current:
        parts.append(current)
    masks = []
    for part in parts:
        mask = torch.zeros(prompt_ids.size(0), dtype=torch.bool, device=prompt_ids.device)
        mask[part] = True
        masks.append(mask)
    return masks


# Per-token values of a batch, [rows, completion width]: what trim_completions cuts with the completions.
_PER_TOKEN = (
    "completion_ids",
    "completion_mask",
    "tool_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
)


def trim_completions(batch: dict[str, Any]) -> dict[str, Any]:
    """The batch without the completion columns that are padding in every one of its rows.

    TRL pads a step's completions to its longest, and dynamic sampling's rounds to the longest of all: one
    truncated row made every row of every micro-batch 64 tokens wide, through the backbone's forward and
    backward (the LM head already sees real tokens only). Padding sits right of each row's last real token,
    so under causal attention no real token sees a cut column, and every loss TRL offers masks or counts
    per real token (`dr_grpo` divides by max_completion_length, not the width): the loss and gradient are
    the untrimmed batch's. Per-row values of width 1 (sequence-level ratios) stay as they are.

    >>> ids, mask = torch.tensor([[5, 6, 0], [7, 0, 0]]), torch.tensor([[1, 1, 0], [1, 0, 0]])
    >>> trim_completions({"completion_ids": ids, "completion_mask": mask})["completion_ids"].tolist()
    [[5, 6], [7, 0]]
    """
    mask = batch["completion_mask"]
    width = mask.size(1)
    used = int(mask.any(dim=0).nonzero().max()) + 1 if mask.any() else 1
    if used == width:
        return batch
    out = dict(batch)
    for key in _PER_TOKEN:
        value = batch.get(key)
        if isinstance(value, torch.Tensor) and value.dim() == 2 and value.size(1) == width:
            out[key] = value[:, :used]
    return out


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


class _DrawnAhead:
    """Completions rolled out for several parts at once, handed out part by part in the order drawn."""

    def __init__(self, prompt_ids: list[list[int]], drawn: Any, logprobs: bool) -> None:
        self.prompt_ids = [list(ids) for ids in prompt_ids]
        self.ids, self.logps = drawn if logprobs else (drawn, None)

    def take(self, prompt_ids: list[list[int]]) -> Any:
        """The next `len(prompt_ids)` rows' completions (with log-probabilities when drawn with them)."""
        n = len(prompt_ids)
        if self.prompt_ids[:n] != [list(ids) for ids in prompt_ids]:
            raise RuntimeError("grpokit: the prompts being scored are not the ones rolled out ahead for them (a bug)")
        ids, self.prompt_ids, self.ids = self.ids[:n], self.prompt_ids[n:], self.ids[n:]
        if self.logps is None:
            return ids
        logps, self.logps = self.logps[:n], self.logps[n:]
        return ids, logps
