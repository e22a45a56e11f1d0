"""The recipe: its schema, loading and overrides, validation, stage planning, TRL's config."""
