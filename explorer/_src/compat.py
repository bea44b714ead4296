"""The few uses of other projects' private internals the explorer cannot do without.

One function per use, each self-contained: what it does through the private route, the public
fallback it takes when that route is gone, and the upstream issue or gap it waits on. Each has a
test (named in its docstring) that fails when the upstream behaviour it relies on changes, so an
upgrade shows there first instead of as a quietly slower or broken page.
"""

from __future__ import annotations

from collections.abc import Callable
from types import FrameType
from typing import Any, NamedTuple

__all__ = ["JAX_LOGGERS", "JitTrace", "jit_trace_in_progress", "lowering_in_progress",
           "module_being_compiled",
           "scan_counts", "scan_options", "template_without_web_fonts"]


def template_without_web_fonts(template: type) -> type:
    """A subclass of the Panel template class ``template`` that asks no font host for a web
    font (Panel's ``VanillaTemplate`` links Google's Lato stylesheet): a served page then asks
    nothing of any host but its own server, and works offline (a classroom, an air-gapped
    machine).

    Private route: the template's class attribute ``_resources["css"]``, which holds that
    stylesheet's address, emptied. Public fallback: when the attribute is not there (or is not
    a dict with a ``"css"`` entry), ``template`` itself, which works online and shows the
    browser's own font offline. Waits on a public switch for a template's web fonts, which
    Panel does not have (none filed upstream as of Panel 1.9.4). Tested by
    ``tests/test_dashboard.py::test_the_served_page_asks_no_font_host``.
    """
    resources: Any = getattr(template, "_resources", None)
    if not isinstance(resources, dict) or not isinstance(resources.get("css"), dict):
        return template
    return type(template.__name__, (template,), {
        "_resources": {**resources, "css": {}}, "__module__": __name__,
        "__doc__": template.__doc__})


# -- explorer.jit and diagnose: how a scan equation splits its operands -------------------------
def scan_counts(params: dict) -> tuple[int, int] | None:
    """``(consts, carries)``: how many of a ``scan`` equation's operands are loop constants and
    how many are carries (the rest are scanned over), or ``None`` when this JAX says neither.

    A jaxpr's equation parameters are not a public API. Up to jax 0.10 a scan says so in the
    parameters ``num_consts`` and ``num_carry``; since jax-ml/jax#39005 ("Use FlatTree to
    structure scan arguments instead of num_carry, num_consts", jax 0.12) in ``ft_in``: a tuple
    (consts, carry, xs) of flat trees (its ``elts``), or, in a transposed scan, one flat tree
    whose ``tree`` (a ``PyTreeDef``) is that tuple. Public fallback: ``None``,
    and the callers do without: the packer evaluates that scan leaf by leaf (same numbers, no
    gain) and diagnose's loop finding counts no carries. Waits on a public description of
    control-flow equations, which JAX does not have (``jax.extend`` exposes the jaxpr types, not
    their primitives' parameters). Tested by ``tests/test_jit.py::test_compat_reads_a_scans_counts``.
    """
    if "num_consts" in params and "num_carry" in params:
        return int(params["num_consts"]), int(params["num_carry"])
    tree = params.get("ft_in")
    try:
        if isinstance(getattr(tree, "elts", None), tuple):  # a tuple of three flat trees
            sizes = [len(part) for part in tree.elts]
        else:  # a flat tree whose PyTreeDef is the tuple (a transposed scan's)
            sizes = [part.num_leaves for part in tree.tree.children()]
    except Exception:  # noqa: BLE001 - any other shape: say nothing rather than guess
        return None
    return (sizes[0], sizes[1]) if len(sizes) == 3 else None


def scan_options(params: dict) -> tuple[int, bool, int | bool] | None:
    """``(length, reverse, unroll)`` of a ``scan`` equation, what ``jax.lax.scan`` takes to
    loop the same way, or ``None`` when this JAX's parameters say otherwise: one missing, or a
    loop option ``jax.lax.scan`` does not take (``_split_transpose`` set).

    Not a public API, as :func:`scan_counts`. Public fallback: ``None``, and explorer.jit's
    packer leaves that scan alone (not merged with its siblings: same numbers, less gain).
    Waits on the same public description of control-flow equations. Tested by
    ``tests/test_jit.py::test_compat_reads_a_scans_options``.
    """
    try:
        length, reverse = int(params["length"]), bool(params["reverse"])
        unroll = params.get("unroll", 1)
    except (KeyError, TypeError, ValueError):
        return None
    if params.get("_split_transpose") or not isinstance(unroll, (bool, int)):
        return None
    return length, reverse, unroll


# -- explorer.watch: what a compile-event listener cannot be told ----------------------------
# The loggers JAX writes its cache-miss explanations, compile log lines and persistent-cache
# messages to, named after its private modules (``logging.getLogger(__name__)`` there). Private
# route: listening on those names. Public fallback: none is needed for correctness: a renamed
# logger only means the watch hears nothing from it (no ``reason``, no dump path), and every
# compile is still listed from ``jax.monitoring``. Waits on the same public compile hook as the
# functions below (jax-ml/jax#4274). Tested by
# ``tests/test_watch.py::test_compat_reads_the_trace_and_the_lowering`` and the reason tests.
JAX_LOGGERS = ("jax._src.interpreters.partial_eval", "jax._src.compiler",
               "jax._src.compilation_cache")

class JitTrace(NamedTuple):
    """A ``jax.jit`` trace that has just finished: its jaxpr and the call that made it."""

    jaxpr: Any  # ClosedJaxpr, before dead code is removed (what ``Traced.jaxpr`` shows)
    fun: Callable  # the function as given to ``jax.jit``
    args: tuple
    kwargs: dict
    static_argnums: tuple[int, ...]
    static_argnames: tuple[str, ...]


def _frame_named(frame: FrameType | None, name: str, filename_end: str,
                 depth: int = 12) -> FrameType | None:
    for _ in range(depth):
        if frame is None:
            return None
        code = frame.f_code
        if code.co_name == name and code.co_filename.replace("\\", "/").endswith(filename_end):
            return frame
        frame = frame.f_back
    return None


def jit_trace_in_progress(frame: FrameType | None) -> JitTrace | None:
    """Inside a listener of ``jax.monitoring``'s ``/jax/core/compile/jaxpr_trace_duration``
    event (called from ``frame`` outwards): the jaxpr just traced and the call that made it.

    The event carries only the function's name; :func:`explorer.watch` needs the jaxpr (its
    equation count and argument leaves) and, for findings, the function and its arguments,
    without tracing again. Private route: the locals of ``jax._src.pjit._trace_for_jit``
    (``jaxpr``, ``fun``, ``args``, ``kwargs``, ``ji``), the frame that fires the event in jax
    0.10. Public fallback: ``None`` (the watch then gives no equation count and no findings,
    and counts argument leaves from the StableHLO signature). Waits on jax-ml/jax#4274 "How to
    detect recompilation reason?" (which asks to "inspect the signature of each compiled
    function"): a public compile hook that passes what was compiled. Tested by
    ``tests/test_watch.py::test_compat_reads_the_trace_and_the_lowering``.
    """
    found = _frame_named(frame, "_trace_for_jit", "jax/_src/pjit.py")
    if found is None:
        return None
    local = found.f_locals
    jaxpr, ji = local.get("jaxpr"), local.get("ji")
    if jaxpr is None or not hasattr(jaxpr, "jaxpr") or not hasattr(jaxpr, "in_avals"):
        return None
    try:
        return JitTrace(jaxpr, local["fun"], tuple(local["args"]), dict(local["kwargs"]),
                        tuple(ji.static_argnums), tuple(ji.static_argnames))
    except (KeyError, AttributeError, TypeError):
        return None


def lowering_in_progress(frame: FrameType | None) -> tuple[Any, int, str | None] | None:
    """Inside a listener of ``/jax/core/compile/jaxpr_to_mlir_module_duration``: the jaxpr
    being lowered, its number of arguments (constants passed as arguments left out) and where
    its function is defined (``"file:line"``, from the jaxpr's debug info, or ``None``).

    For a compile that no ``jax.jit`` trace preceded (``jax.grad`` of a jitted function called
    eagerly lowers its derivative's jaxpr directly). Private route: the locals of
    ``jax._src.interpreters.pxla._cached_lowering_to_hlo`` (``closed_jaxpr``, ``in_avals``,
    ``num_const_args``); the jaxpr there has had unused arguments and dead equations removed.
    Public fallback: ``None``. Waits on the same public compile hook as
    :func:`jit_trace_in_progress` (jax-ml/jax#4274). Tested by
    ``tests/test_watch.py::test_compat_reads_the_trace_and_the_lowering``.
    """
    found = _frame_named(frame, "_cached_lowering_to_hlo", "jax/_src/interpreters/pxla.py")
    if found is None:
        return None
    local = found.f_locals
    jaxpr, in_avals = local.get("closed_jaxpr"), local.get("in_avals")
    if jaxpr is None or not hasattr(jaxpr, "jaxpr") or in_avals is None:
        return None
    try:
        n_args = len(in_avals) - int(local.get("num_const_args") or 0)
    except TypeError:
        return None
    src = getattr(getattr(jaxpr.jaxpr, "debug_info", None), "func_src_info", None)
    definition = src.rsplit(" at ", 1)[1] if isinstance(src, str) and " at " in src else None
    return jaxpr, n_args, definition


def module_being_compiled(frame: FrameType | None) -> Any | None:
    """Inside a listener of ``/jax/core/compile/backend_compile_duration`` (called from
    ``frame`` outwards): the StableHLO module XLA was just given (an ``ir.Module``).

    :func:`explorer.watch` needs the module's size (``len(Lowered.as_text())``) for each
    compile; the public route, ``jax_dump_ir_to``, prints and writes every module inside XLA's
    timed stage, most of the watch's cost. JAX's lowering cache holds the module anyway, so the
    watch keeps a reference and prints it when its records are read. Private route: the local
    ``computation`` of ``jax._src.interpreters.pxla._cached_compilation``, the frame that fires
    the event in jax 0.10 (``module.operation.get_asm`` is MLIR's own printer, the one
    ``Lowered.as_text`` uses). Public fallback: ``None``, and the watch keeps dumping the IR.
    Waits on the same public compile hook as :func:`jit_trace_in_progress` (jax-ml/jax#4274).
    Tested by ``tests/test_watch.py::test_compat_reads_the_module_being_compiled``.
    """
    found = _frame_named(frame, "_cached_compilation", "jax/_src/interpreters/pxla.py")
    if found is None:
        return None
    module = found.f_locals.get("computation")
    return module if hasattr(getattr(module, "operation", None), "get_asm") else None
