"""Floor 3: the measuring core: problems, representations, ``measure``/``compare``/``blame``, fits (no Panel)."""
