"""Floor 1: results on disk: one SQLite row per measurement, written the moment it finishes (no JAX)."""
