"""Writing one of our standalone HTML pages (a diagnose report, a watch page) safely.

One home for the rules both pages follow: written atomically (a reader never sees half a page),
an existing file replaced only when it is one of ours (its ``generator`` meta tag says so), and
the file's mode the umask's, as ``open()`` would give (``mkstemp`` alone makes it 0600).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["generator_tag", "is_ours", "write_page"]


def generator_tag(generator: str) -> str:
    """The meta tag that marks a page as ours (put it in the page's head)."""
    return f'<meta name="generator" content="{generator}">'


def is_ours(path: Path, generator: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return False
    return generator_tag(generator) in head


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask sets it; put it straight back
    os.umask(mask)
    return mask


def write_page(path: str | os.PathLike, document: str, *, generator: str, what: str,
               example: str) -> Path:
    """Write ``document`` to ``path`` and return the path.

    Args:
        generator: the page kind's generator name (see :func:`generator_tag`).
        what: the page kind in words, for the refusal ("a diagnose report").
        example: a file name to suggest when ``path`` is a folder ("report.html").

    Raises:
        ValueError: one line: ``path`` is a folder, its folder does not exist, or it is a file
            that is not one of ours.
    """
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{target} is a directory; give a file name such as {example}")
    if not target.parent.is_dir():
        raise ValueError(f"cannot write {target}: folder {target.parent} does not exist")
    if target.exists() and not is_ours(target, generator):
        raise ValueError(f"{target} exists and is not {what}; choose another name")
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".explorer-", suffix=".html")
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(document)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
