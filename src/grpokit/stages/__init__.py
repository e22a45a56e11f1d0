"""The stage pipeline: sft and grpo stages, the trainer subclass, dynamic sampling, health, console."""
