"""Private implementation of the explorer, one sub-package per layer (see the README's "How the code is laid out").

The public API is what ``explorer/__init__.py`` re-exports; nothing under ``_src`` is public.
"""
