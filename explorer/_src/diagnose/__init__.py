"""Floor 4: ``explorer.diagnose``: why a user's function compiles slowly, and what to write instead."""
