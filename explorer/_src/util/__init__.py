"""Floor 1: argument checks and ``MODULE:ATTR`` references, shared by every layer above; imports nothing of ours."""
