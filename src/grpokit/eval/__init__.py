"""Evaluation of a model on a task's split (accuracy, format rate, pass@k) and chat."""
