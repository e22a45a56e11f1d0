"""What the fused training-pass tests (test_fused_lora, test_fused_ops) compare: a language-model loss and
every parameter's gradient, on token ids and adapters moved off their initial values."""

import torch


def token_ids() -> torch.Tensor:
    return torch.randint(3, 400, (3, 11), generator=torch.Generator().manual_seed(1))


def nudge(model, part: str = "lora_") -> None:
    """Move every parameter whose name contains `part`: LoRA's B starts at zero, which would leave A's gradient
    zero and compare nothing."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if part in name:
                param.add_(0.1 * torch.randn_like(param))


def loss_and_grads(model, ids: torch.Tensor, autocast: bool = False) -> tuple[torch.Tensor, dict]:
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(input_ids=ids).logits
    loss = logits.float().log_softmax(-1)[:, :-1].gather(2, ids[:, 1:, None]).mean()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
