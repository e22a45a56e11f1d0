"""Run folders: status records, checkpoints and resume, disk space."""
