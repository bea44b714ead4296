"""Private: see explorer/__init__.py for the public API and the README's "How the code is laid out"."""
