"""Cold, stage-by-stage measurement of one JAX program.

How a compile is taken, in one place: each repeat clears JAX's in-memory caches, turns the
persistent compilation cache off, wraps the function in a fresh ``jax.jit`` and times
``trace``, ``lower`` and ``compile`` on their own. ``jax.monitoring`` events seen during the
compile stage are counted and stored on the :class:`Measurement`, so a reader can check that
XLA really compiled (``backend_compiles >= 1``) and that nothing came from a cache
(``cache_hits == 0``).
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend.core as jex_core
from jax.experimental.compilation_cache import compilation_cache as _persistent_cache

from .leaves import hold_static

from ..util.validate import MAX_REPEATS, MAX_RUNS, check_int

_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT = "/jax/compilation_cache/cache_hits"


class _CompileEvents:
    """Thread-safe counters fed by ``jax.monitoring`` listeners (registered once, lazily)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._registered = False
        self.backend_compiles = 0
        self.backend_compile_s = 0.0
        self.cache_hits = 0

    def ensure_registered(self) -> None:
        with self._lock:
            if self._registered:
                return
            jax.monitoring.register_event_listener(self._on_event)
            jax.monitoring.register_event_duration_secs_listener(self._on_duration)
            self._registered = True

    def _on_event(self, event: str, **kwargs: Any) -> None:
        if event == _CACHE_HIT:
            with self._lock:
                self.cache_hits += 1

    def _on_duration(self, event: str, duration: float, **kwargs: Any) -> None:
        if event == _BACKEND_COMPILE:
            with self._lock:
                self.backend_compiles += 1
                self.backend_compile_s += float(duration)

    def snapshot(self) -> tuple[int, float, int]:
        with self._lock:
            return self.backend_compiles, self.backend_compile_s, self.cache_hits


_EVENTS = _CompileEvents()


@dataclasses.dataclass(frozen=True)
class Measurement:
    """What one cold measurement of a program found.

    Times are seconds (medians over ``repeats`` cold repeats; ``*_spread`` is max - min, ``None``
    for a single repeat). Sizes are what JAX reports: ``hlo_pre_bytes`` is the length of the
    StableHLO text from ``Lowered.as_text()``, ``hlo_post_bytes`` of the optimised HLO from
    ``Compiled.as_text()``. A figure the backend does not give is ``None``; so are the memory
    figures (``temp_bytes``, ``argument_bytes``, ``output_bytes``, ``generated_code_bytes``,
    from ``Compiled.memory_analysis()``) unless the measurement asked for them
    (``memory=True``).
    """

    name: str
    trace_s: float
    lower_s: float
    compile_s: float
    first_run_s: float
    run_s: float
    repeats: int
    trace_s_spread: float | None
    lower_s_spread: float | None
    compile_s_spread: float | None
    run_s_spread: float | None
    xla_compile_s: float | None
    jaxpr_eqns: int
    jaxpr_eqns_top: int
    n_leaves: int
    hlo_pre_bytes: int
    hlo_post_bytes: int | None
    flops: float | None
    bytes_accessed: float | None
    temp_bytes: int | None
    argument_bytes: int | None
    output_bytes: int | None
    generated_code_bytes: int | None
    backend: str
    device_kind: str
    jax_version: str
    jaxlib_version: str
    backend_compiles: int
    cache_hits: int
    cold: bool

    @property
    def total_compile_s(self) -> float:
        """Trace + lower + compile: what a user waits for before the first run."""
        return self.trace_s + self.lower_s + self.compile_s

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


MEASUREMENT_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Measurement))


def count_eqns(jaxpr: Any) -> int:
    """Equations in a jaxpr including every sub-jaxpr (scan, cond, pjit bodies...)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)  # ClosedJaxpr -> Jaxpr
    total = len(jaxpr.eqns)
    for sub in jex_core.subjaxprs(jaxpr):
        total += count_eqns(sub)
    return total


def _cost(compiled: Any) -> tuple[float | None, float | None]:
    try:
        cost = compiled.cost_analysis()
    except Exception:  # best-effort API: some backends raise
        return None, None
    if isinstance(cost, (list, tuple)):  # older jax returned one dict per device
        cost = cost[0] if cost else None
    if not isinstance(cost, dict):
        return None, None
    flops = cost.get("flops")
    accessed = cost.get("bytes accessed")
    return (float(flops) if flops is not None else None,
            float(accessed) if accessed is not None else None)


_MEMORY_FIELDS = {
    "temp_bytes": "temp_size_in_bytes",
    "argument_bytes": "argument_size_in_bytes",
    "output_bytes": "output_size_in_bytes",
    "generated_code_bytes": "generated_code_size_in_bytes",
}


def _memory(compiled: Any) -> dict[str, int | None]:
    names = _MEMORY_FIELDS
    try:
        stats = compiled.memory_analysis()
    except Exception:
        stats = None
    out: dict[str, int | None] = {}
    for key, attr in names.items():
        value = getattr(stats, attr, None) if stats is not None else None
        out[key] = int(value) if value is not None and value >= 0 else None
    return out


def _optimised_text(compiled: Any) -> str | None:
    try:
        text = compiled.as_text()
    except Exception:
        return None
    return text if isinstance(text, str) else None


def _device(backend: str | None) -> jax.Device:
    if backend is not None and not isinstance(backend, str):
        raise ValueError(f"backend must be a name such as 'cpu' or 'gpu', got {backend!r}")
    try:
        devices = jax.devices(backend) if backend else jax.devices()
    except RuntimeError as err:
        raise ValueError(f"backend {backend!r} is not available here ({err})") from None
    return devices[0]


_warmed: set[str] = set()


def _warm_up(device: jax.Device) -> None:
    """Compile one trivial program per backend and process before the first measurement.

    The first XLA compile in a process also pays one-time backend set-up; without this, the
    first case measured in a fresh worker would look slower than it is.
    """
    if device.platform in _warmed:
        return
    jax.jit(lambda x: x * 2 + 1).lower(jax.numpy.ones(3)).compile()
    _warmed.add(device.platform)


def _spread(values: Sequence[float]) -> float | None:
    return (max(values) - min(values)) if len(values) > 1 else None


def _fun_name(fn: Callable) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def measure(
    fn: Callable,
    *args: Any,
    static_argnums: int | Sequence[int] = (),
    repeats: int = 1,
    runs: int = 5,
    backend: str | None = None,
    name: str | None = None,
    on_stage: Callable[[str], None] | None = None,
    memory: bool = False,
) -> Measurement:
    """Measure ``fn(*args)`` cold: trace, lower, compile and run, each timed on its own.

    Args:
      fn: any JAX-traceable function (not already jitted is best; a jitted one works too).
        An :func:`explorer.jit` function is measured as its call compiles it: its packed
        program on the stacked arrays (``trace_s`` is that program's trace; the trace and
        packing of your function, once per structure, are its ``.report``'s ``trace_s`` and
        ``pack_s``).
      *args: example arguments, including the static ones.
      static_argnums: as for ``jax.jit``.
      repeats: cold repeats; every figure is the median, ``*_spread`` the max - min.
      runs: steady-state calls timed after the first run (median reported).
      backend: ``"cpu"``, ``"gpu"``, ... (default: JAX's default backend).
      name: label stored on the result (default: the function's name).
      on_stage: called with ``"trace"``, ``"lower"``, ``"compile"``, ``"run"`` as each starts.
      memory: also ask XLA for its memory analysis. Off by default: on the CPU backend it runs
        a heap simulation of the whole program (about 15 ms for jax-ml/jax#4667's dict program
        at N=100, a third of everything ``measure`` adds to the stages it times).

    Returns:
      A :class:`Measurement`.
    """
    return measure_traced(fn, *args, static_argnums=static_argnums, repeats=repeats, runs=runs,
                          backend=backend, name=name, on_stage=on_stage, memory=memory)[0]


def measure_traced(fn: Callable, *args: Any, static_argnums: int | Sequence[int] = (),
                   repeats: int = 1, runs: int = 5, backend: str | None = None,
                   name: str | None = None, on_stage: Callable[[str], None] | None = None,
                   memory: bool = False) -> tuple[Measurement, Any]:
    """:func:`measure`, also returning the last repeat's ``jax.stages.Traced`` (its jaxpr), so a
    caller that reads the program (``diagnose``) does not trace it a second time."""
    check_int("repeats", repeats, 1, MAX_REPEATS)  # the caps a sweep's specs have
    check_int("runs", runs, 1, MAX_RUNS)
    if callable(getattr(fn, "packed_function", None)):
        # An explorer.jit function: what its call compiles is its packed program, which takes
        # the stacked arrays (traced inside a jax.jit, it would stack the leaves in-program).
        program, stacked = fn.packed_function(*args)
        fn, args, static_argnums = program, tuple(stacked), ()
    # What the user's call compiles: an eqx.filter_jit step's non-array leaves held static, an
    # nnx.jit step's in-place updates returned (see leaves.py); plain programs as they are.
    fn, args, static = hold_static(fn, args, static_argnums)
    device = _device(backend)
    with jax.default_device(device):
        return _measure_on(device, fn, args, static, repeats, runs, name, on_stage, memory)


def _measure_on(device: jax.Device, fn: Callable, args: tuple, static: tuple[int, ...],
                repeats: int, runs: int, name: str | None,
                on_stage: Callable[[str], None] | None, memory: bool) -> tuple[Measurement, Any]:
    # Uncommitted placement on the default device: committing (device_put(x, device)) would add
    # a sharding attribute per argument to the StableHLO and so inflate hlo_pre_bytes.
    dynamic = [a for i, a in enumerate(args) if i not in static]
    placed = jax.device_put(dynamic)
    placed_iter = iter(placed)
    call_args = [a if i in static else next(placed_iter) for i, a in enumerate(args)]
    jax.block_until_ready(placed)
    n_leaves = len(jax.tree_util.tree_leaves(placed))
    _EVENTS.ensure_registered()
    stage = on_stage or (lambda _s: None)

    trace_t, lower_t, compile_t, first_t, run_t, xla_t = [], [], [], [], [], []
    compiles_total, hits_total = 0, 0
    previous_cache = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    # JAX decides once per process, at its first compile, whether the persistent cache is used,
    # and ignores the flag after that: reset so the flag is read again (here and afterwards).
    _persistent_cache.reset_cache()
    try:
        _warm_up(device)  # with the persistent cache off too: a cache hit would skip the set-up
        for _ in range(repeats):
            jax.clear_caches()
            jitted = jax.jit(fn, static_argnums=static)
            c0, x0, h0 = _EVENTS.snapshot()
            stage("trace")
            t0 = time.perf_counter()
            traced = jitted.trace(*call_args)
            t1 = time.perf_counter()
            stage("lower")
            lowered = traced.lower()
            t2 = time.perf_counter()
            stage("compile")
            compiled = lowered.compile()
            t3 = time.perf_counter()
            c1, x1, h1 = _EVENTS.snapshot()
            stage("run")
            t4 = time.perf_counter()
            jax.block_until_ready(compiled(*placed))
            t5 = time.perf_counter()
            steady = []
            for _ in range(runs):
                s0 = time.perf_counter()
                jax.block_until_ready(compiled(*placed))
                steady.append(time.perf_counter() - s0)
            trace_t.append(t1 - t0)
            lower_t.append(t2 - t1)
            compile_t.append(t3 - t2)
            first_t.append(t5 - t4)
            run_t.append(statistics.median(steady))
            xla_t.append(x1 - x0 if c1 > c0 else None)
            compiles_total += c1 - c0
            hits_total += h1 - h0
    finally:
        jax.config.update("jax_enable_compilation_cache", previous_cache)
        _persistent_cache.reset_cache()

    flops, accessed = _cost(compiled)
    post = _optimised_text(compiled)
    xla_known = [x for x in xla_t if x is not None]
    import jaxlib  # noqa: PLC0415 - version only

    measurement = Measurement(
        name=name or _fun_name(fn),
        trace_s=statistics.median(trace_t),
        lower_s=statistics.median(lower_t),
        compile_s=statistics.median(compile_t),
        first_run_s=statistics.median(first_t),
        run_s=statistics.median(run_t),
        repeats=repeats,
        trace_s_spread=_spread(trace_t),
        lower_s_spread=_spread(lower_t),
        compile_s_spread=_spread(compile_t),
        run_s_spread=_spread(run_t),
        xla_compile_s=statistics.median(xla_known) if len(xla_known) == repeats else None,
        jaxpr_eqns=count_eqns(traced.jaxpr),
        jaxpr_eqns_top=len(traced.jaxpr.jaxpr.eqns),
        n_leaves=n_leaves,
        hlo_pre_bytes=len(lowered.as_text()),
        hlo_post_bytes=len(post) if post is not None else None,
        flops=flops,
        bytes_accessed=accessed,
        **(_memory(compiled) if memory else dict.fromkeys(_MEMORY_FIELDS)),
        backend=device.platform,
        device_kind=device.device_kind,
        jax_version=jax.__version__,
        jaxlib_version=jaxlib.__version__,
        backend_compiles=compiles_total,
        cache_hits=hits_total,
        cold=compiles_total >= repeats and hits_total == 0,
    )
    return measurement, traced


def measure_case(case: Any, target: str = "loss", **options: Any) -> Measurement:
    """Measure a built-in case (see ``build_case``) for ``target`` ``"loss"`` or ``"grad"``."""
    fn = case.function(target)
    label = (f"{case.problem}/{case.representation}/N={case.n_states}/"
             f"H={case.horizon}/{target}")
    options.setdefault("name", label)
    return measure(fn, *case.args, **options)


def program_texts(fn: Callable, *args: Any, static_argnums: int | Sequence[int] = (),
                  on_stage: Callable[[str], None] | None = None) -> dict[str, str | None]:
    """The jaxpr, StableHLO and optimised HLO of ``fn(*args)``, as text (``None`` where missing).

    ``on_stage`` is called with ``"trace"``, ``"lower"``, ``"compile"`` and ``"print"`` as each
    starts (printing a large program takes a while too)."""
    stage = on_stage or (lambda _s: None)
    jitted = jax.jit(fn, static_argnums=static_argnums)
    stage("trace")
    traced = jitted.trace(*args)
    stage("lower")
    lowered = traced.lower()
    stage("compile")
    compiled = lowered.compile()
    stage("print")
    return {
        "jaxpr": str(traced.jaxpr),
        "stablehlo": lowered.as_text(),
        "hlo": _optimised_text(compiled),
    }
