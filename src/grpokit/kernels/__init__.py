"""Speed only: each module is exact against a plain reference and imports torch and model wrappers."""
