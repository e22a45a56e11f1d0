"""The shared-prefix training pass (grpokit.kernels.prefix) gives TRL's unshared pass's log-probabilities, loss and
gradients: each prompt forwarded once, its gradient the sum of its completions' copies."""

from contextlib import nullcontext

import pytest
import torch

from grpokit.kernels.prefix import prompt_groups
from grpokit.recipe.load import build_recipe
from grpokit.recipe.trl_args import build_grpo_config
from grpokit.rollout.sampler import base_model
from tests.conftest import tiny_recipe

PAD = 2  # the tiny tokenizer's pad (<|im_end|>)


def _batch(seed: int = 0) -> dict:
    """Three prompts of 5, 9 and 7 tokens (left padding), groups of 3, 2 and 3 completions of different
    lengths (right padding), as a GRPO step hands them to the loss after zero-advantage rows were dropped."""
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 400, (n,), generator=gen) for n in (5, 9, 7)]
    groups, completion_lengths = (3, 2, 3), (6, 1, 4, 6, 3, 5, 2, 6)
    width = max(len(p) for p in prompts)
    rows = [p for p, g in zip(prompts, groups, strict=True) for _ in range(g)]
    prompt_ids = torch.full((len(rows), width), PAD)
    prompt_mask = torch.zeros_like(prompt_ids)
    for i, p in enumerate(rows):
        prompt_ids[i, width - len(p) :], prompt_mask[i, width - len(p) :] = p, 1
    completion_ids = torch.full((len(rows), max(completion_lengths)), PAD)
    completion_mask = torch.zeros_like(completion_ids)
    for i, n in enumerate(completion_lengths):
        completion_ids[i, :n], completion_mask[i, :n] = torch.randint(3, 400, (n,), generator=gen), 1
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.randn(len(rows), generator=gen),
        "num_items_in_batch": completion_mask.sum(),
    }


def _trainer(model_dir, tmp_path, lora: bool, beta: float, packed: bool = True):
    """A GRPO trainer on the tiny Llama. `packed`: grpokit's attention (a CPU's), whose pass forwards each
    micro-batch's prompts and completions as one sequence; else sdpa (a GPU's), whose pass forwards the
    prompts, then the completions on their cache."""
    import transformers

    from grpokit.models.load import load_model
    from grpokit.stages import pipeline as train
    from grpokit.stages.trainer import GrpoTrainer
    from grpokit.tasks import build_task

    raw = tiny_recipe(model_dir, tmp_path, lora={"enabled": lora, "r": 4, "alpha": 8}, rewards=[{"name": "format"}])
    raw["grpo"].update({"beta": beta})
    recipe = build_recipe(raw)
    transformers.set_seed(0)
    model, tokenizer = load_model(recipe.model.name)
    if lora:
        model = train.attach_lora(model, recipe)
    with torch.no_grad():  # LoRA's B starts at zero; move every trained weight so each gradient is non-trivial
        for param in model.parameters():
            if param.requires_grad:
                param.add_(0.05 * torch.randn_like(param))
    trainer = GrpoTrainer(
        model=model,
        reward_funcs=[lambda prompts, completions, **kw: [0.0] * len(completions)],
        processing_class=tokenizer,
        args=build_grpo_config(recipe, tmp_path / "g"),
        train_dataset=train.build_train_dataset(build_task("arithmetic"), tokenizer, recipe),
    )
    if not packed:
        base_model(trainer.model).set_attn_implementation("sdpa")
    return trainer


def _loss_and_grads(trainer, batch: dict, shared: bool) -> tuple[torch.Tensor, dict, dict]:
    trainer.shared_prefix = shared
    inputs = dict(batch)
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    width = batch["completion_ids"].size(1)
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train, which this test does not run
    trainer.model.zero_grad(set_to_none=True)
    with torch.no_grad():  # the old-policy and reference passes take the same path
        inputs["old_per_token_logps"] = trainer._get_per_token_logps_and_entropies(
            trainer.model, input_ids, attention_mask, width, batch_size=3
        )[0]
        if trainer.beta > 0:
            ref = trainer.ref_model if trainer.ref_model is not None else trainer.model
            with trainer.model.disable_adapter() if trainer.ref_model is None else nullcontext():
                inputs["ref_per_token_logps"] = trainer._get_per_token_logps_and_entropies(
                    ref, input_ids, attention_mask, width
                )[0]
    logps, entropy, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, input_ids, attention_mask, width, compute_entropy=True
    )
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    values = {"logps": logps.detach(), "entropy": entropy.detach(), **{k: v for k, v in inputs.items() if "logps" in k}}
    return loss.detach(), grads, values


def _micro_batched_matches(trainer, batch, shared, loss_ref, grads_ref, measure):
    """The loss and gradients in the trainer's micro-batches equal the references; `measure(input_ids)` of
    every forward, in order."""
    seen = []
    hook = trainer.model.get_base_model().model.embed_tokens.register_forward_hook(
        lambda module, args, out: seen.append(measure(args[0]))
    )
    try:
        loss, grads, _ = _loss_and_grads(trainer, batch, shared)
    finally:
        hook.remove()
    torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-7)
    for name, grad in grads_ref.items():
        assert (grads[name] - grad).abs().max() <= 1e-5 * grad.abs().max(), name
    return seen


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize(("lora", "beta"), [(True, 0.0), (True, 0.2), (False, 0.0), (False, 0.2)])
def test_shared_prefix_pass_equals_the_unshared_pass(tiny_model_dir, tmp_path, lora, beta, packed):
    trainer = _trainer(tiny_model_dir, tmp_path, lora, beta, packed)
    assert trainer.shared_prefix, "the tiny Llama qualifies for the shared pass"
    batch = _batch()
    loss, grads, values = _loss_and_grads(trainer, batch, shared=True)
    loss_ref, grads_ref, values_ref = _loss_and_grads(trainer, batch, shared=False)

    assert loss.abs() > 1e-4, "a loss of zero would compare nothing"
    torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-7)
    for key, value in values_ref.items():
        torch.testing.assert_close(values[key], value, rtol=1e-5, atol=1e-6, msg=key)
    assert grads.keys() == grads_ref.keys() and len(grads) > 0
    for name, grad in grads_ref.items():
        assert grad.abs().max() > 0, f"{name}: a zero gradient compares nothing"
        scale = grad.abs().max()
        assert (grads[name] - grad).abs().max() <= 1e-5 * scale, name


def test_each_prompt_is_forwarded_once_with_its_completions(tiny_model_dir, tmp_path):
    trainer = _trainer(tiny_model_dir, tmp_path, lora=True, beta=0.0)
    batch = _batch()
    seen = []
    backbone = trainer.model.get_base_model().model
    hook = backbone.embed_tokens.register_forward_hook(lambda module, args, out: seen.append(tuple(args[0].shape)))
    try:
        _loss_and_grads(trainer, batch, shared=True)
    finally:
        hook.remove()
    prompt, completion = batch["prompt_ids"].size(1), batch["completion_ids"].size(1)
    # Rows A A A B B C C C. Old log-probs 3 rows at a time (AAA, BBC, CC), then the policy's log-probs and the
    # loss: each one sequence of its distinct prompts and then its completions, every layer called once.
    chunks = [(1, 3), (2, 3), (1, 2), (3, 8), (3, 8)]
    assert seen == [(1, prompts * prompt + rows * completion) for prompts, rows in chunks]


def test_each_prompt_is_forwarded_once(tiny_model_dir, tmp_path):
    trainer = _trainer(tiny_model_dir, tmp_path, lora=True, beta=0.0, packed=False)
    batch = _batch()
    seen = []
    backbone = trainer.model.get_base_model().model
    hook = backbone.embed_tokens.register_forward_hook(lambda module, args, out: seen.append(tuple(args[0].shape)))
    try:
        _loss_and_grads(trainer, batch, shared=True)
    finally:
        hook.remove()
    prompt_width, completion_width = batch["prompt_ids"].size(1), batch["completion_ids"].size(1)
    # Rows A A A B B C C C. Old log-probs 3 rows at a time (AAA, BBC, CC: a group split across chunks is
    # forwarded in each), then the policy's log-probs and the loss: one row per distinct prompt.
    assert [rows for rows, width in seen if width == prompt_width] == [1, 2, 1, 3, 3]
    assert [rows for rows, width in seen if width == completion_width] == [3, 3, 2, 8, 8]
    assert len(seen) == 10, "nothing else forwarded: no row carries its whole prompt"


def test_prompt_groups_gather_identical_prompts_wherever_they_sit():
    ids = torch.tensor([[0, 7, 8], [7, 8, 9], [0, 7, 8], [7, 8, 9], [0, 7, 8]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1], [1, 1, 1], [0, 1, 1]])
    first, group = prompt_groups(ids, mask)
    assert first.tolist() == [0, 1] and group.tolist() == [0, 1, 0, 1, 0]
    # same tokens, different padding: different prompts
    first, group = prompt_groups(torch.tensor([[2, 7], [2, 7]]), torch.tensor([[0, 1], [1, 1]]))
    assert group.tolist() == [0, 1]


def test_a_shuffled_batch_forwards_each_prompt_once_with_the_same_result(tiny_model_dir, tmp_path):
    """TRL shuffles a generation batch's rows before the training pass: A C B A C A B C, not A A A B B C C C."""
    trainer = _trainer(tiny_model_dir, tmp_path, lora=True, beta=0.0, packed=False)
    order = torch.tensor([0, 5, 3, 1, 6, 2, 4, 7])
    batch = {k: v[order] if v.dim() else v for k, v in _batch().items()}
    loss_ref, grads_ref, _ = _loss_and_grads(trainer, batch, shared=False)
    seen = []
    backbone = trainer.model.get_base_model().model
    hook = backbone.embed_tokens.register_forward_hook(lambda module, args, out: seen.append(tuple(args[0].shape)))
    try:
        loss, grads, _ = _loss_and_grads(trainer, batch, shared=True)
    finally:
        hook.remove()
    torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-7)
    for name, grad in grads_ref.items():
        assert (grads[name] - grad).abs().max() <= 1e-5 * grad.abs().max(), name
    # The policy's log-probs and the loss (the last four forwards): the three prompts once each, then 8 rows.
    assert [rows for rows, _ in seen[-4:]] == [3, 8, 3, 8]


def test_a_training_step_forwards_each_prompt_once(tiny_model_dir, tmp_path):
    """Through TRL's own step (its shuffle included): 2 prompts x 4 completions, every row trained."""
    import random

    trainer = _trainer(tiny_model_dir, tmp_path, lora=True, beta=0.0, packed=False)
    rng = random.Random(0)

    def varied(prompts, completions, **kwargs):  # rewards that differ, so no row is skipped
        return [rng.random() for _ in completions]

    trainer.reward_funcs[0] = varied
    trainer.args.max_steps = 1
    seen = []
    backbone = trainer.model.get_base_model().model
    # Rollouts run without gradients (on the merged copy, which carries this hook too): the pass runs with them.
    hook = backbone.embed_tokens.register_forward_hook(
        lambda module, args, out: seen.append(args[0].size(0)) if torch.is_grad_enabled() else None
    )
    try:
        trainer.train()
    finally:
        hook.remove()
    assert trainer.state.log_history[0]["rows_trained_frac"] == 1.0
    assert seen == [2, 8], "one forward of the 2 distinct prompts, one of the 8 completions"


def test_models_the_pass_cannot_hold_fall_back_to_trl(tiny_model_dir, tmp_path):
    trainer = _trainer(tiny_model_dir, tmp_path, lora=True, beta=0.0)
    trainer.model.get_base_model().gradient_checkpointing_enable()
    assert not trainer._shared_prefix_allowed()


@pytest.mark.parametrize("shared", [True, False])
def test_micro_batches_give_the_whole_batch_loss_and_gradient(tiny_model_dir, tmp_path, shared):
    trainer = _trainer(tiny_model_dir, tmp_path, lora=True, beta=0.2, packed=False)
    trainer.model.train()
    batch = _batch(seed=1)
    trainer.micro_batch_rows = None
    loss_ref, grads_ref, _ = _loss_and_grads(trainer, batch, shared)
    trainer.micro_batch_rows = 3  # rows A A A | B B | C C C: whole groups, one micro-batch each
    seen = _micro_batched_matches(trainer, batch, shared, loss_ref, grads_ref, lambda ids: ids.size(0))
    assert max(seen[-6:] if shared else seen[-3:]) == 3, "the loss ran on micro-batches of at most 3 rows"


def test_micro_batches_keep_groups_whole_and_split_only_groups_too_large():
    from grpokit.stages.trainer import micro_batches

    ids = torch.tensor([[1]] * 5 + [[2]] * 2 + [[3]])
    parts = [m.nonzero().squeeze(1).tolist() for m in micro_batches(ids, torch.ones_like(ids), 3)]
    assert parts == [[0, 1, 2], [3, 4], [5, 6, 7]]
    parts = [m.nonzero().squeeze(1).tolist() for m in micro_batches(ids, torch.ones_like(ids), 8)]
    assert parts == [list(range(8))]


@pytest.mark.parametrize("shared", [True, False])
def test_each_micro_batch_is_as_wide_as_its_longest_completion(tiny_model_dir, tmp_path, shared):
    trainer = _trainer(tiny_model_dir, tmp_path, lora=True, beta=0.2, packed=False)
    trainer.model.train()
    batch = _batch(seed=1)
    # Group A (rows 0-2) ends by its fourth token; B and C reach the batch's width of 6.
    batch["completion_mask"][:3, 4:] = 0
    batch["completion_ids"][:3, 4:] = PAD
    batch["num_items_in_batch"] = batch["completion_mask"].sum()
    trainer.micro_batch_rows = None
    loss_ref, grads_ref, _ = _loss_and_grads(trainer, batch, shared)
    trainer.micro_batch_rows = 3
    widths = _micro_batched_matches(trainer, batch, shared, loss_ref, grads_ref, lambda ids: ids.size(1))
    prompt = batch["prompt_ids"].size(1)
    # The loss's forwards are the last ones: A's micro-batch 4 completion columns wide, B's and C's 6.
    loss_widths = widths[-6:] if shared else widths[-3:]
    completions = loss_widths[1::2] if shared else [w - prompt for w in loss_widths]
    assert completions == [4, 6, 6]


def test_packed_micro_batches_give_the_whole_batch_loss_and_gradient(tiny_model_dir, tmp_path):
    """The packed pass (grpokit's attention) in micro-batches of whole groups, a shuffled batch, one group
    ending early (each micro-batch as wide as its longest completion)."""
    trainer = _trainer(tiny_model_dir, tmp_path, lora=True, beta=0.2)
    trainer.model.train()
    batch = {k: v[torch.tensor([0, 5, 3, 1, 6, 2, 4, 7])] if v.dim() else v for k, v in _batch(seed=1).items()}
    batch["completion_mask"][batch["prompt_ids"][:, -1] == batch["prompt_ids"][0, -1], 4:] = 0  # A's rows
    batch["num_items_in_batch"] = batch["completion_mask"].sum()
    trainer.micro_batch_rows = None
    loss_ref, grads_ref, _ = _loss_and_grads(trainer, batch, shared=False)
    trainer.micro_batch_rows = 3
    tokens = _micro_batched_matches(trainer, batch, True, loss_ref, grads_ref, lambda ids: tuple(ids.shape))
    prompt = batch["prompt_ids"].size(1)
    # The loss's three forwards, groups as they first appear (A C B): A's 3 rows 4 columns wide, C's 3 and
    # B's 2 rows 6 wide, one prompt each.
    assert tokens[-3:] == [(1, prompt + 3 * 4), (1, prompt + 3 * 6), (1, prompt + 2 * 6)]


def test_an_attention_that_drops_the_packed_layout_falls_back_to_two_calls(tiny_model_dir, tmp_path, monkeypatch):
    from grpokit.kernels import attention

    trainer = _trainer(tiny_model_dir, tmp_path, lora=True, beta=0.0)
    batch = _batch()
    loss_ref, grads_ref, _ = _loss_and_grads(trainer, batch, shared=False)

    def dropped(module, query, key, value, packed, scaling, **kwargs):  # as a model that never passes it on
        return torch.zeros(1, query.size(2), query.size(1), query.size(3))

    monkeypatch.setattr(attention, "_packed_attention", dropped)
    loss, grads, _ = _loss_and_grads(trainer, batch, shared=True)
    torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-7)
    for name, grad in grads_ref.items():
        assert (grads[name] - grad).abs().max() <= 1e-5 * grad.abs().max(), name
    assert base_model(trainer.model)._grpokit_unpacked, "two calls from then on"


CAP = 2.0


def _with_sampler(trainer, batch: dict, seed: int = 2) -> tuple[dict, torch.Tensor]:
    """`batch` with the sampler's log-probabilities (`sampling_per_token_logps`): the policy's own moved by
    up to 1.5 nats either way (weights exp(-1.5)..exp(1.5) around the cap of 2), row 3's all NaN (a guide's
    demonstration, not drawn); and the policy's log-probabilities [B, C] they were moved from."""
    trainer.shared_prefix = False  # TRL's pass: the reference either training pass must match
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        policy = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, batch["completion_ids"].size(1))[
            0
        ]
    gen = torch.Generator().manual_seed(seed)
    sampled = policy + (torch.rand(policy.shape, generator=gen) * 3 - 1.5)
    sampled = sampled * batch["completion_mask"]  # TRL pads the sampler's log-probabilities with 0
    sampled[3] = float("nan")
    return {**batch, "sampling_per_token_logps": sampled}, policy


def _loss_and_grads_of(trainer, inputs: dict, shared: bool, micro: int | None) -> tuple[torch.Tensor, dict]:
    """The trainer's loss (TRL's, no old log-probabilities: the default on-policy step) and its gradients."""
    trainer.shared_prefix, trainer.micro_batch_rows = shared, micro
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train, which this test does not run
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(trainer.model, dict(inputs))
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


def _hand_grads(trainer, inputs: dict, weight: torch.Tensor) -> dict:
    """The gradient of TRL's dapo loss at ratio 1 with each token's term multiplied by `weight` [B, C]
    (detached): -sum(A * w * log pi * mask) / num_items_in_batch."""
    trainer.model.zero_grad(set_to_none=True)
    trainer.shared_prefix, trainer.micro_batch_rows = False, None
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    logps = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, inputs["completion_ids"].size(1))[0]
    terms = inputs["advantages"].unsqueeze(1) * weight * logps * inputs["completion_mask"]
    (-terms.sum() / inputs["num_items_in_batch"]).backward()
    return {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


def _assert_grads_close(grads: dict, expected: dict) -> None:
    assert grads.keys() == expected.keys() and any(g.abs().sum() > 0 for g in expected.values())
    for name, grad in expected.items():
        assert (grads[name] - grad).abs().max() <= 1e-5 * grad.abs().max(), name


@pytest.mark.parametrize("micro", [None, 3])
@pytest.mark.parametrize("shared", [True, False])
def test_truncated_importance_sampling_weights_each_tokens_gradient(tiny_model_dir, tmp_path, shared, micro):
    """train_pass.importance_sampling_cap: each completion token's gradient is multiplied by the detached
    weight min(pi / pi_sampler, cap) (1 where the sampler drew nothing), in either training pass and in
    micro-batches; the loss's value is the uncorrected one, bit for bit."""
    trainer = _trainer(tiny_model_dir, tmp_path, lora=True, beta=0.0)
    trainer.model.train()
    assert trainer.args.loss_type == "dapo"
    inputs, policy = _with_sampler(trainer, _batch(seed=1))
    weight = (policy - inputs["sampling_per_token_logps"]).exp().clamp(max=CAP)
    weight[3] = 1.0
    drawn = inputs["completion_mask"].bool()
    drawn[3] = False
    assert (weight[drawn] == CAP).any() and (weight[drawn] < 1).any(), "some weights capped, some below 1"

    trainer.importance_sampling_cap = None
    loss_off, grads_off = _loss_and_grads_of(trainer, inputs, shared, micro)
    _assert_grads_close(grads_off, _hand_grads(trainer, inputs, torch.ones_like(weight)))  # the hand loss is TRL's
    trainer.importance_sampling_cap = CAP
    loss_on, grads_on = _loss_and_grads_of(trainer, inputs, shared, micro)
    assert torch.equal(loss_on, loss_off)
    _assert_grads_close(grads_on, _hand_grads(trainer, inputs, weight))
    rows = trainer._metrics["train"]
    assert rows["sampling/importance_sampling_ratio/max"][-1] == pytest.approx(CAP)
    assert rows["sampling/importance_sampling_ratio/mean"][-1] == pytest.approx(float(weight[drawn].mean()), rel=1e-5)
    assert rows["sampling/importance_sampling_ratio/min"][-1] == pytest.approx(float(weight[drawn].min()), rel=1e-5)


@pytest.mark.parametrize("micro", [None, 3])
@pytest.mark.parametrize("shared", [True, False])
def test_the_sampler_policy_mismatch_is_logged_per_trained_token(tiny_model_dir, tmp_path, shared, micro):
    """Each step logs the mean and max |log pi - log pi_sampler| over the completion tokens the loss trains
    (TRL's names for vLLM), one figure per step however many micro-batches: tokens the sampler did not draw
    (NaN) are left out. Without a cap the gradient is the one without the sampler's log-probabilities, bit
    for bit."""
    trainer = _trainer(tiny_model_dir, tmp_path, lora=True, beta=0.0)
    trainer.model.train()
    batch = _batch(seed=1)
    inputs, policy = _with_sampler(trainer, batch)
    drawn = inputs["completion_mask"].bool()
    drawn[3] = False
    gap = (policy - inputs["sampling_per_token_logps"]).abs()[drawn]

    plain_loss, plain_grads = _loss_and_grads_of(trainer, batch, shared, micro)
    metrics = trainer._metrics["train"]
    assert "sampling/sampling_logp_difference/mean" not in metrics  # nothing to compare against
    loss, grads = _loss_and_grads_of(trainer, inputs, shared, micro)
    assert metrics["sampling/sampling_logp_difference/mean"] == [pytest.approx(float(gap.mean()), rel=1e-5)]
    assert metrics["sampling/sampling_logp_difference/max"] == [pytest.approx(float(gap.max()), rel=1e-5)]
    assert "sampling/importance_sampling_ratio/mean" not in metrics
    assert torch.equal(loss, plain_loss)
    assert grads.keys() == plain_grads.keys()
    assert all(torch.equal(grads[name], plain_grads[name]) for name in grads)
