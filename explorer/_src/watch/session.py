"""The object ``with explorer.watch() as w:`` gives: the records, their ranking and report."""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .record import FIELDS, CompileRecord
from .watcher import HUB, Raw, build_record, hlo_chars, module_chars, recompile_reason

if TYPE_CHECKING:  # pandas is imported when a frame is asked for, not in the program's time
    import pandas as pd

DEFAULT_TOP = 0.10  # findings for the functions over this share of the total compile time
HELD_MODULES = 256  # StableHLO modules kept unprinted; past this, the oldest is printed at once


class Watch:
    """Every compilation made while the ``with`` block ran (see :func:`watch`).

    Attributes:
        wall_s: seconds the block took (``None`` while it runs).
        overhead_s: of those, seconds the watch itself spent (its listeners, and writing the
            StableHLO it reads); JAX's cache-miss explanations, made inside its tracing
            where the watch cannot read the traces themselves, are not in it. Shared by
            watches open at the same time.
        notes: plain sentences about the run itself: a watch inside another, several threads
            compiling, events that could not be read.
    """

    def __init__(self, *, findings: bool = True, top: float = DEFAULT_TOP,
                 pack: bool = True) -> None:
        if not isinstance(findings, bool) or not isinstance(pack, bool):
            raise ValueError("findings and pack must be True or False")
        if isinstance(top, bool) or not isinstance(top, (int, float)) or not 0 <= top <= 1:
            raise ValueError(f"top must be a share of the compile time between 0 and 1, "
                             f"got {top!r}")
        self.findings_wanted = findings
        self.top = float(top)
        self.pack = pack
        self.wall_s: float | None = None
        self.overhead_s: float | None = None
        self._busy0 = 0.0
        self.notes: list[str] = []
        self._lock = threading.Lock()
        self._raws: list[Raw] = []
        # Each record's function object, numbered within its name and place (None: unknown),
        # told apart while it is alive: the reasons are worded later, when it may be gone.
        self._objects: list[int | None] = []
        self._alive: dict[tuple[str, str], list[tuple[Any, int]]] = {}
        self._n_objects = 0
        self._records: tuple[CompileRecord, ...] | None = None  # once closed
        self._calls: dict[tuple[str, str], tuple[float, Any, Any]] = {}
        self._sizes: dict[int, tuple[int | None, int | None]] = {}  # record -> chars, args
        self._modules: dict[int, Any] = {}  # record -> its module, until printed
        self._errors: collections.Counter[str] = collections.Counter()
        self._state = "new"
        self._t0 = 0.0
        self._findings: list[Any] | None = None

    # -- the with block ---------------------------------------------------------------------
    def __enter__(self) -> Watch:
        if self._state != "new":
            raise RuntimeError("this explorer.watch() was already used; start a new one")
        self._t0 = time.perf_counter()
        outer = HUB.open(self)  # raises, with nothing left changed, if it cannot listen
        self._state = "open"
        self._busy0 = HUB.busy_s
        if outer:
            self.notes.append(
                "this watch ran inside (or beside, in another thread) another explorer.watch "
                "block: both list the compilations made while this one was open")
        inner = ("another explorer.watch block ran inside this one (or beside it, in another "
                 "thread); its compilations are listed here too")
        for w in outer:
            if inner not in w.notes:
                w.notes.append(inner)
        return self

    def __exit__(self, *exc: object) -> bool:
        self.wall_s = time.perf_counter() - self._t0
        self.overhead_s = HUB.busy_s - self._busy0
        with self._lock:
            self._state = "closed"  # a compile finishing now, in another thread, is not ours
        try:
            self._read_sizes(modules=False)  # before the last watch's dump folder goes
        finally:
            HUB.close(self)
            self._say_threads_and_errors()
        return False

    # -- fed by the listeners (any thread) --------------------------------------------------
    def add(self, raw: Raw) -> None:
        key = (raw.name, raw.where)
        with self._lock:
            if self._state != "open":
                return
            if raw.call is not None:
                if self.findings_wanted:
                    seconds = raw.compile_s or 0.0
                    if key not in self._calls or seconds > self._calls[key][0]:
                        # the slowest compile's call
                        self._calls[key] = (seconds, raw.call, raw.entry)
                # The call (the program's arguments) is held once, in _calls, until the
                # findings are made; the records keep none (another watch may be fed the
                # same raw).
                raw = dataclasses.replace(raw, call=None, entry=None)
            if raw.module is not None:  # printed when the records are read
                self._modules[len(self._raws)] = raw.module
                raw = dataclasses.replace(raw, module=None)
                if len(self._modules) > HELD_MODULES:  # a long program: hold no more
                    oldest = next(iter(self._modules))
                    self._sizes[oldest] = module_chars(self._modules.pop(oldest))
            self._objects.append(self._object_number(key, raw))
            self._raws.append(raw)

    def _object_number(self, key: tuple[str, str], raw: Raw) -> int | None:
        fun = raw.key.fun() if raw.key is not None and raw.key.fun is not None else None
        if fun is None:
            return None
        alive = [(ref, n) for ref, n in self._alive.get(key, ()) if ref() is not None]
        number = next((n for ref, n in alive if ref() is fun), None)
        if number is None:
            number, self._n_objects = self._n_objects, self._n_objects + 1
            alive.append((raw.key.fun, number))
        self._alive[key] = alive
        return number

    def note_error(self, err: BaseException) -> None:
        with self._lock:
            self._errors[f"{type(err).__name__}: {err}"] += 1

    def _read_sizes(self, modules: bool = True) -> None:
        """Each record's StableHLO size: from its dump file, or its module (then let go)."""
        with self._lock:
            raws = list(self._raws)
            held = dict(self._modules) if modules else {}
            self._modules = {i: m for i, m in self._modules.items() if i not in held}
        for i, raw in enumerate(raws):
            if raw.dump_path and i not in self._sizes:
                self._sizes[i] = hlo_chars(raw.dump_path)
        for i, module in held.items():
            self._sizes[i] = module_chars(module)

    def _say_threads_and_errors(self) -> None:
        threads = sorted({r.thread for r in self._raws})
        if len(threads) > 1:
            self.notes.append(
                f"{len(threads)} threads compiled ({', '.join(threads)}): each compile is "
                "recorded in the thread that made it; their times overlap, so they can add "
                "up to more than the wall time")
        for message, n in self._errors.items():
            self.notes.append(f"{n} compile event(s) could not be read ({message}); "
                              "their records may lack a figure")

    # -- what it recorded -------------------------------------------------------------------
    @property
    def compiles(self) -> tuple[CompileRecord, ...]:
        """One :class:`CompileRecord` per compilation, in the order they finished."""
        if self._records is not None:
            return self._records
        with self._lock:
            raws, objects, closed = list(self._raws), list(self._objects), \
                self._state == "closed"
        self._read_sizes(modules=True)
        out = []
        seen: dict[tuple[str, str], list[int]] = {}
        for i, raw in enumerate(raws):  # the reasons are worded here, not in the program
            earlier = seen.setdefault((raw.name, raw.where), [])
            same = None if objects[i] is None else [
                raws[j] for j in earlier if objects[j] == objects[i]]
            reason = recompile_reason(raw, [raws[j] for j in earlier], same)
            earlier.append(i)
            hlo, n_args = self._sizes.get(i, (None, None))
            out.append(build_record(raw, hlo, n_args, reason, self._t0))
        if closed:
            self._records = tuple(out)
        return tuple(out)

    def to_frame(self, details: bool = False) -> pd.DataFrame:
        """One row per compilation, the columns of :class:`CompileRecord`'s fields (with
        ``details=True`` also ``called_at``, ``thread`` and ``started_s``)."""
        import pandas as pd

        columns = list(FIELDS) + (["called_at", "thread", "started_s"] if details else [])
        rows = [{c: getattr(r, c) for c in columns} for r in self.compiles]
        frame = pd.DataFrame(rows, columns=columns)
        return frame.astype({"reason": object, "name": object, "where": object})  # None stays None

    @property
    def compile_s(self) -> float:
        """XLA compile seconds, all compilations together."""
        return sum(r.compile_s or 0.0 for r in self.compiles)

    @property
    def total_s(self) -> float:
        """Trace + lower + compile seconds, all compilations together."""
        return sum(r.total_s for r in self.compiles)

    @property
    def share_of_wall(self) -> float | None:
        """Trace + lower + compile as a share of the block's wall time (``None`` while open);
        above 1 when threads compiled at once."""
        return self.total_s / self.wall_s if self.wall_s else None

    def summary(self) -> pd.DataFrame:
        """One row per function (name and ``where``), most XLA compile seconds first.

        Columns: ``name``, ``where``, ``compiles``, ``compile_s`` (total), ``share`` (of all
        compile seconds), ``trace_s``, ``lower_s``, ``total_s``, ``eqns`` and ``hlo_pre_bytes``
        (the largest), ``n_leaves``, ``cache_hits``, ``recompiles`` and ``reason`` (the most
        frequent). ``attrs`` holds ``wall_s``, ``compile_s``, ``total_s`` and
        ``share_of_wall`` (trace + lower + compile as a share of the wall time).
        """
        from .report import summary_frame

        return summary_frame(self)

    # -- findings and reports ---------------------------------------------------------------
    @property
    def findings(self) -> list[Any]:
        """:func:`explorer.diagnose` of the top functions, made (once) after the block closed;
        a :class:`~explorer._src.watch.findings.FunctionFindings` per function."""
        if self._state != "closed":
            raise RuntimeError("findings are made after the watch closes (outside the `with` "
                               "block), so they do not count in the program's time")
        if self._findings is None:
            from .findings import make_findings

            self._findings = make_findings(self) if self.findings_wanted else []
            self._calls.clear()  # the user's arguments are not held any longer than this
        return self._findings

    def __str__(self) -> str:
        from .report import text

        return text(self)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        from .report import html_fragment

        return html_fragment(self)

    def to_html(self, path: str | os.PathLike) -> Path:
        """Write one standalone page (everything inline: it opens offline): the ranking as a
        chart and a table, every compilation, and the findings of the top functions. Refuses
        to replace a file that is not such a page."""
        from .report import write_html

        return write_html(self, path)


def watch(*, findings: bool = True, top: float = DEFAULT_TOP, pack: bool = True) -> Watch:
    """Record every compilation a block of code makes, and rank the functions by compile time.

    ``with explorer.watch() as w: run_my_program()``, then ``print(w)``, ``w.summary()``,
    ``w.compiles``, ``w.to_html("compiles.html")``. The program computes exactly what it
    would have; the watch only listens (``jax.monitoring`` events, the traces JAX makes, the
    StableHLO JAX is asked to dump into a folder of ours) and puts every setting back when the
    block ends, exception or not.

    Args:
      findings: after the block, run :func:`explorer.diagnose` (tracing only: what was
        compiled is not compiled again) on the top functions with the arguments they were
        compiled for. ``False`` keeps no reference to the program's arguments.
      top: the share of the total compile time from which a function gets findings.
      pack: let those findings try :func:`explorer.pack` (``diagnose(try_pack=...)``).

    Returns:
      A :class:`Watch` (use it as a context manager, once).
    """
    return Watch(findings=findings, top=top, pack=pack)
