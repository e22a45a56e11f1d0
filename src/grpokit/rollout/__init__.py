"""Sampling completions from the policy."""
