"""``explorer.watch``: every compilation a program makes, recorded without changing the program.

How it listens, public hooks first:

- ``jax.monitoring`` duration events, each with the function's name (``fun_name``): tracing
  (``/jax/core/compile/jaxpr_trace_duration``), lowering to StableHLO
  (``.../jaxpr_to_mlir_module_duration``) and XLA's compile (``.../backend_compile_duration``,
  one per compilation: the count ``jax_log_compiles`` logs); ``/jax/compilation_cache/cache_hits``
  marks a compile the persistent cache served.
- Each ``jax.jit`` trace itself (``explorer._src.compat``): its equations, its arguments'
  types and paths, its static arguments and its function, from which a recompile's cause is
  worded when the records are read (``record.TraceKey``).
- ``jax_explain_cache_misses``, only until the first trace is read so (the route above failed
  otherwise): JAX's own explanation of each tracing-cache miss, read from its logger and kept
  from the user's terminal unless they had asked for it.
- The StableHLO module each compile is given, whose printed length is the program's size with
  no second lowering: a reference to the module JAX's lowering cache holds anyway, printed when
  the records are read (``explorer._src.compat``). Where that route fails, ``jax_dump_ir_to``
  (into a folder of ours, removed on exit), until the first compile whose module is read.
  Writing the dump happens inside XLA's timed stage; that time (the dump's log record's
  timestamp less the stage's start) is taken out of ``compile_s``.
- Python's own stack (``sys._getframe``) for the user's line.

Two things no public hook gives, the traced jaxpr (equations, argument leaves, what the trace
was keyed on) and the call (function and arguments, for findings), come through
``explorer._src.compat``, with a fallback.
Every listener, config option and logger setting changed is put back when the last watch
closes, exception or not. Listeners never raise into the user's program: a failure to read an
event is counted and said in the report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

import jax

from .. import compat
from ..core.measure import count_eqns
from .record import (CallSignature, CompileRecord, TraceKey, UserCall, call_change,
                     definition_of, explain, is_user_file, key_change, trace_key, user_call,
                     user_frame)

TRACE = "/jax/core/compile/jaxpr_trace_duration"
LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE = "/jax/core/compile/backend_compile_duration"
CACHE_HIT = "/jax/compilation_cache/cache_hits"

EXPLAIN_LOGGER, COMPILER_LOGGER, CACHE_LOGGER = compat.JAX_LOGGERS
_DUMPED = "Dumped the module to "
# Messages JAX raises to WARNING only because jax_explain_cache_misses is on.
_EXPLAIN_ONLY = ("TRACING CACHE MISS", "PERSISTENT COMPILATION CACHE MISS",
                 "Not writing persistent cache entry")
_MODULE_RE = re.compile(r"^\w+\((.*)\)$")


def _config(name: str) -> Any:
    """A config option's value: the attribute for options with a context manager, else the
    ``values`` table (``jax_dump_ir_to`` and its kind have no attribute)."""
    try:
        return getattr(jax.config, name)
    except AttributeError:
        return jax.config.values[name]


def module_inner_name(module_name: str) -> str:
    """``jit(step)`` -> ``step``: the function's name inside a module name."""
    m = _MODULE_RE.match(module_name or "")
    return m.group(1) if m else (module_name or "?")


@dataclasses.dataclass
class _Trace:
    name: str
    trace_s: float
    eqns: int | None
    n_leaves: int | None
    definition: str | None
    reason: str | None
    never_seen: bool
    key: TraceKey | None
    call: Any  # compat.JitTrace or None: the function and arguments, for findings
    entry: UserCall | None  # the user's call of a library's jit of their function


@dataclasses.dataclass
class _Lower:
    lower_s: float
    trace: _Trace | None
    eqns: int | None
    n_leaves: int | None
    definition: str | None


@dataclasses.dataclass
class Raw:
    """A compile as it was seen, before its StableHLO dump is read."""

    name: str
    where: str
    called_at: str | None
    trace_s: float | None
    lower_s: float | None
    compile_s: float | None
    n_leaves: int | None
    eqns: int | None
    cache_hit: bool
    jax_reason: str | None
    never_seen: bool
    key: TraceKey | None  # what the trace was keyed on; None without a jax.jit trace read
    user_defined: bool  # the compiled function is defined in the user's code
    call_signature: CallSignature | None  # the user's arguments, for a function a library wraps
    dump_path: str | None
    module: Any  # the StableHLO module (an ir.Module), printed when the records are read
    thread: str
    ended: float  # time.perf_counter()
    call: Any
    entry: UserCall | None


class _PerThread(threading.local):
    def __init__(self) -> None:
        self.explains: dict[str, Any] = {}
        self.traces: dict[str, _Trace] = {}
        self.lowers: dict[str, _Lower] = {}
        self.compile_start: dict[str, float] = {}
        self.dump: tuple[str, float] | None = None
        self.hit = False


class _Tap(logging.Filter):
    """A filter on one JAX logger: reads the records the watch needs, and lets through only
    what the user would have seen without the watch."""

    def __init__(self, hub: _Hub, user_level: int) -> None:
        super().__init__()
        self.hub, self.user_level = hub, user_level

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a record we cannot format is not ours to judge
            return True
        ours = False
        if message.startswith("TRACING CACHE MISS"):
            self.hub.on_explain(message)
            ours = not self.hub.user_explains
        elif message.startswith(_DUMPED):
            self.hub.on_dump(message[len(_DUMPED):].rstrip("."), record.created)
            ours = self.hub.own_dump is not None
        elif message.startswith(_EXPLAIN_ONLY):
            ours = not self.hub.user_explains
        return not ours and record.levelno >= self.user_level


class _Hub:
    """The process's one set of listeners, installed while at least one watch is open."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.watches: list[Any] = []
        self.local = _PerThread()
        self.user_explains = False
        self.own_dump: str | None = None
        self.dump_dir: str | None = None
        self.dump_readable = False
        self.busy_s = 0.0  # seconds spent in the listeners and writing the IR dumps
        self._undo: list[Any] = []
        self._explaining: list[Any] = []  # puts jax_explain_cache_misses back
        self._dump_config: list[Any] = []  # puts back the options our own dump changed

    # -- opening and closing ----------------------------------------------------------------
    def open(self, w: Any) -> list[Any]:
        """Start feeding ``w``; returns the watches already open (nesting is said, not refused)."""
        with self.lock:
            outer = list(self.watches)
            if not self.watches:
                self._install()
            self.watches.append(w)
            return outer

    def close(self, w: Any) -> None:
        with self.lock:
            if w in self.watches:
                self.watches.remove(w)
            if not self.watches:
                self._uninstall()

    def _install(self) -> None:
        undo = self._undo
        try:
            self.user_explains = bool(_config("jax_explain_cache_misses"))
            if not self.user_explains:  # until the first trace is read (see _traced)
                jax.config.update("jax_explain_cache_misses", True)
                self._explaining.append(
                    lambda: jax.config.update("jax_explain_cache_misses", False))
                undo.append(self._stop_explaining)
            user_dir = _config("jax_dump_ir_to")
            if user_dir:  # the user dumps already: read their files, never touch their options
                self.own_dump, self.dump_dir = None, user_dir
                self.dump_readable = ("stablehlo" in str(_config("jax_dump_ir_modes")).split(",")
                                      and not _debug_info_in_dumps())
            else:
                self.own_dump = tempfile.mkdtemp(prefix="explorer-watch-")
                self.dump_dir, self.dump_readable = self.own_dump, True
                own = self.own_dump
                undo.append(lambda: shutil.rmtree(own, ignore_errors=True))
                undo.append(self._stop_own_dump)
                for name, value in (("jax_dump_ir_modes", "stablehlo"),
                                    ("jax_include_debug_info_in_dumps", False),
                                    ("jax_dump_ir_to", own)):
                    old = _config(name)
                    jax.config.update(name, value)
                    self._dump_config.append(
                        lambda name=name, old=old: jax.config.update(name, old))
            for name, needed in ((EXPLAIN_LOGGER, logging.WARNING),
                                 (COMPILER_LOGGER, logging.INFO), (CACHE_LOGGER, None)):
                logger = logging.getLogger(name)
                tap = _Tap(self, logger.getEffectiveLevel())
                logger.addFilter(tap)
                undo.append(lambda logger=logger, tap=tap: logger.removeFilter(tap))
                if needed is not None and logger.getEffectiveLevel() > needed:
                    old_level = logger.level
                    logger.setLevel(needed)
                    undo.append(lambda logger=logger, old=old_level: logger.setLevel(old))
            mon = jax.monitoring
            mon.register_event_duration_secs_listener(self.on_duration)
            undo.append(lambda: mon.unregister_event_duration_listener(self.on_duration))
            mon.register_event_listener(self.on_event)
            undo.append(lambda: mon.unregister_event_listener(self.on_event))
            mon.register_scalar_listener(self.on_scalar)
            undo.append(lambda: mon.unregister_scalar_listener(self.on_scalar))
        except BaseException:
            self._uninstall()
            raise

    def _stop_explaining(self) -> None:
        with self.lock:
            while self._explaining:
                with contextlib.suppress(Exception):
                    self._explaining.pop()()

    def _stop_own_dump(self) -> None:
        """Put the dump options back (the modules are read without it, or the watch ends)."""
        with self.lock:
            while self._dump_config:
                step = self._dump_config.pop()
                with contextlib.suppress(Exception):
                    step()

    def _uninstall(self) -> None:
        while self._undo:
            step = self._undo.pop()
            with contextlib.suppress(Exception):
                step()
        self.own_dump = None
        self.local = _PerThread()

    # -- what the listeners hear ------------------------------------------------------------
    def _guard(self, fn: Any, *args: Any) -> None:
        t0 = time.perf_counter()
        try:
            fn(*args)
        except Exception as err:  # noqa: BLE001 - never raise into the user's program
            for w in list(self.watches):
                w.note_error(err)
        finally:
            self.busy_s += time.perf_counter() - t0

    def on_explain(self, message: str) -> None:
        def read() -> None:
            e = explain(message)
            if e.name:
                self.local.explains[e.name] = e
        self._guard(read)

    def on_dump(self, file_name: str, created: float) -> None:
        self.local.dump = (file_name, created)

    def on_event(self, event: str, **kwargs: Any) -> None:
        if event == CACHE_HIT:
            self.local.hit = True

    def on_scalar(self, event: str, value: float, **kwargs: Any) -> None:
        if event == COMPILE:
            self.local.compile_start[str(kwargs.get("fun_name"))] = float(value)

    def on_duration(self, event: str, duration: float, **kwargs: Any) -> None:
        if event == TRACE:
            self._guard(self._traced, str(kwargs.get("fun_name")), float(duration))
        elif event == LOWER:
            self._guard(self._lowered, str(kwargs.get("fun_name")), float(duration))
        elif event == COMPILE:
            self._guard(self._compiled, str(kwargs.get("fun_name")), float(duration))

    def _traced(self, name: str, duration: float) -> None:
        st = self.local
        e = st.explains.pop(name, None)
        st.explains.clear()  # the rest were functions traced inside this one
        jt = compat.jit_trace_in_progress(sys._getframe(3))
        eqns = n_leaves = key = None
        definition = e.definition if e else None
        if jt is not None:
            if self._explaining:  # the trace is read: the causes come from it from now on
                self._stop_explaining()
            eqns, n_leaves = count_eqns(jt.jaxpr), len(jt.jaxpr.in_avals)
            key = trace_key(jt)
            definition = definition_of(jt.fun) or definition
        users = definition is not None and is_user_file(definition.rsplit(":", 1)[0])
        wanted = jt is not None and any(w.findings_wanted for w in self.watches)
        # A library's jit of the user's function (eqx.filter_jit, nnx.jit hand jax.jit a
        # wrapper of their own): its call is held too, diagnosed as JAX traced it (the user's
        # lines are inside), and the user's own call of the library's wrapper beside it, for a
        # library whose call needs its own context (nnx.jit's).
        entry = user_call(sys._getframe(3)) if wanted else None
        if wanted and not users:
            users = entry is not None or user_frame(sys._getframe(3))[1] is not None
        keep_call = wanted and users
        st.traces[name] = _Trace(
            name=name, trace_s=duration, eqns=eqns, n_leaves=n_leaves, definition=definition,
            reason=e.reason if e else None, never_seen=e is not None and e.never_seen,
            key=key, call=jt if keep_call else None, entry=entry)

    def _lowered(self, module: str, duration: float) -> None:
        st = self.local
        trace = st.traces.pop(module_inner_name(module), None)
        eqns = n_leaves = definition = None
        if trace is None:  # compiled without a jax.jit trace: a derivative, say
            low = compat.lowering_in_progress(sys._getframe(3))
            if low is not None:
                eqns, n_leaves, definition = count_eqns(low[0]), low[1], low[2]
        st.lowers[module] = _Lower(duration, trace, eqns, n_leaves, definition)

    def _compiled(self, module: str, duration: float) -> None:
        st = self.local
        ended = time.perf_counter()
        low = st.lowers.pop(module, None)
        start = st.compile_start.pop(module, None)
        dump, st.dump = st.dump, None
        hit, st.hit = st.hit, False
        compile_s, dump_path = duration, None
        if dump is not None and self.dump_dir:  # written just before, in this thread
            dump_path = os.path.join(self.dump_dir, dump[0]) if self.dump_readable else None
            if start is not None and self.own_dump is not None:
                writing = max(0.0, dump[1] - start)
                compile_s = max(0.0, duration - writing)  # our writing, out
                self.busy_s += writing
        hlo_module = compat.module_being_compiled(sys._getframe(3))
        if hlo_module is not None and self._dump_config:  # read without the dump from now on
            self._stop_own_dump()
        trace = low.trace if low else None
        called_at, wrapped, call_signature = user_frame(sys._getframe(3), call=True)
        definition = trace.definition if trace else (low.definition if low else None)
        user_defined = bool(definition and is_user_file(definition.rsplit(":", 1)[0]))
        if user_defined:
            where = definition
        else:
            where = wrapped or called_at or definition or "<unknown>"
        raw = Raw(
            name=trace.name if trace else module_inner_name(module), where=where,
            called_at=called_at, trace_s=trace.trace_s if trace else None,
            lower_s=low.lower_s if low else None, compile_s=compile_s,
            n_leaves=trace.n_leaves if trace else (low.n_leaves if low else None),
            eqns=trace.eqns if trace else (low.eqns if low else None), cache_hit=hit,
            jax_reason=trace.reason if trace else None,
            never_seen=trace.never_seen if trace else False,
            key=trace.key if trace else None, user_defined=user_defined,
            call_signature=call_signature,
            dump_path=dump_path, module=hlo_module,
            thread=threading.current_thread().name, ended=ended,
            call=trace.call if trace else None, entry=trace.entry if trace else None)
        for w in list(self.watches):
            w.add(raw)


def _debug_info_in_dumps() -> bool:
    return str(_config("jax_include_debug_info_in_dumps")).lower() not in ("false", "0")


HUB = _Hub()


def hlo_chars(path: str | None) -> tuple[int | None, int | None]:
    """Characters of a dumped StableHLO module, and its ``@main``'s argument count."""
    if not path:
        return None, None
    try:
        with open(path, encoding="utf-8") as f:
            return hlo_figures(f.read())
    except OSError:
        return None, None


def module_chars(module: Any) -> tuple[int | None, int | None]:
    """The same of a module, printed as ``Lowered.as_text()`` prints it (no debug info)."""
    try:
        return hlo_figures(module.operation.get_asm(enable_debug_info=False))
    except Exception:  # noqa: BLE001 - a module that no longer prints: no size, said as None
        return None, None


def hlo_figures(text: str) -> tuple[int, int | None]:
    main = re.search(r"func\.func public @main\((.*?)\)\s*(?:->|attributes|\{)", text, re.DOTALL)
    n_args = len(re.findall(r"%arg\d+:", main.group(1))) if main else None
    return len(text), n_args


def build_record(raw: Raw, hlo: int | None, n_args: int | None, reason: str | None,
                 t0: float) -> CompileRecord:
    n_leaves = raw.n_leaves if raw.n_leaves is not None else (n_args or 0)
    return CompileRecord(
        name=raw.name, where=raw.where, trace_s=raw.trace_s, lower_s=raw.lower_s,
        compile_s=raw.compile_s, n_leaves=int(n_leaves), hlo_pre_bytes=hlo, eqns=raw.eqns,
        cache_hit=raw.cache_hit, reason=reason, called_at=raw.called_at, thread=raw.thread,
        started_s=max(0.0, raw.ended - t0))


NEW_OBJECT = ("new function object each call: it is defined again every time, so JAX's cache "
              "of the earlier one never applies (define it once, outside the loop)")


def recompile_reason(raw: Raw, earlier: list[Raw], same_object: list[Raw] | None
                     ) -> str | None:
    """Why ``raw`` compiled, given the ``earlier`` compiles of the same function (name and
    place) in this watch and, of those, the ones of the same function object (``None``: not
    known). For a function a library wraps (``eqx.filter_jit``), what changed in the user's
    own arguments; else what changed in what the trace was keyed on; else JAX's reason."""
    if not earlier:  # first compiled here; JAX may know of an earlier compile
        return None if raw.never_seen or raw.key is not None else raw.jax_reason
    previous = earlier[-1]
    if change := call_change(previous.call_signature, raw.call_signature):
        return change
    if raw.trace_s is None:
        return ("compiled without a new trace: a transformed version of it (jax.grad or "
                "jax.vmap of the jitted function outside jit), or JAX's caches were cleared")
    if raw.key is not None:
        if raw.user_defined and same_object is not None and not same_object:
            return NEW_OBJECT
        # JAX makes a new function for each eager operation: its own are compared by type
        keys = [r.key for r in (same_object if raw.user_defined and same_object else earlier)
                if r.key is not None]
        if keys and (change := key_change(raw.key, keys)):
            return change
        if not raw.user_defined and raw.where == raw.called_at:  # an op JAX defines
            return ("an eager operation compiled again for other static parameters (a new "
                    "shape or option of a jax.numpy call outside jit, say)")
        return ("compiled again with the same arguments: JAX's tracing context changed (a "
                "config option or context manager such as jax.default_matmul_precision or "
                "jax.enable_x64), or its caches were cleared")
    if raw.jax_reason is not None:
        return raw.jax_reason
    if raw.never_seen:
        return ("new function object: the same definition was compiled before as another "
                "object (a fresh jax.jit or lambda each time?)")
    return ("compiled again (JAX gave no explanation: its caches were cleared, or another "
            "device or sharding)")
