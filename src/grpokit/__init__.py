"""grpokit: post-train LLMs to reason with GRPO on verifiable rewards, on top of TRL."""

__version__ = "0.1.0"
