"""Floor 2: ``explorer.pack`` and ``explorer.jit``: per-name code compiled like one array (a jaxpr-level vectoriser)."""
