"""Package data: the built-in model catalog (config.json fields, no weights)."""
