"""Scoring untrusted completions: the client the trainer calls, the confined worker, its screens."""
