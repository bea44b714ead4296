"""One compilation as :func:`explorer.watch` saw it, and how its cause and its place are read.

*Why* a function was compiled again is what changed in what JAX keyed its trace on (the
arguments' types and paths, the static arguments, the function object), read from the traces
themselves (:class:`TraceKey`) and, for a function a library wraps, from the user's own call
(:func:`call_signature`); where no trace can be read, JAX's own tracing-cache-miss explanation
(``jax_explain_cache_misses``, jax-ml/jax#19129), condensed to one line. *Where* the user's
code is: the first frame, going out from JAX, that is neither JAX's, nor the explorer's, nor an
installed library's (equinox, optax, diffrax, flax, ...).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import re
import site
import sys
import sysconfig
import weakref
from types import FrameType
from typing import Any

import jax

FIELDS = ("name", "where", "trace_s", "lower_s", "compile_s", "n_leaves", "hlo_pre_bytes",
          "eqns", "cache_hit", "reason")
MAX_REASON = 240  # characters: a reason is one line of a table


@dataclasses.dataclass(frozen=True)
class CompileRecord:
    """One XLA compilation (or persistent-cache load) made while a :func:`explorer.watch` ran.

    Attributes:
        name: the compiled function's name (``step``; ``broadcast_in_dim`` for an eager op).
        where: ``"file:line"`` of the user's definition of the function; for a function defined
            inside JAX or a library (an eager ``jnp`` call, ``diffrax.diffeqsolve``), the line
            of the user's code that called it.
        trace_s: seconds tracing to a jaxpr; ``None`` when this compile reused a trace.
        lower_s: seconds lowering the jaxpr to StableHLO.
        compile_s: seconds in XLA's compile (or reading the persistent cache, see ``cache_hit``).
        n_leaves: array arguments as JAX saw them (leaves of the non-static arguments).
        hlo_pre_bytes: characters of the StableHLO text, as ``len(Lowered.as_text())``;
            ``None`` where it could not be read.
        eqns: jaxpr equations, sub-jaxprs (scan, cond, nested jit bodies) included; ``None``
            when no jaxpr was seen.
        cache_hit: the persistent compilation cache served the executable (no XLA compile).
        reason: for a function compiled again, why, in one line (a shape, a dtype, a static
            argument, a new function object each call); ``None`` for a first compile.
        called_at: ``"file:line"`` of the user's line that led to the compile.
        thread: the name of the thread that compiled.
        started_s: seconds from the start of the watch to the end of this compile.
    """

    name: str
    where: str
    trace_s: float | None
    lower_s: float | None
    compile_s: float | None
    n_leaves: int
    hlo_pre_bytes: int | None
    eqns: int | None
    cache_hit: bool
    reason: str | None
    called_at: str | None = None
    thread: str = "MainThread"
    started_s: float = 0.0

    @property
    def total_s(self) -> float:
        """Trace + lower + compile seconds (the parts that were measured)."""
        return sum(s for s in (self.trace_s, self.lower_s, self.compile_s) if s is not None)


# -- whose code is a file? -------------------------------------------------------------------
def _package_dir(module: str) -> str | None:
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    return os.path.dirname(os.path.abspath(path)) + os.sep if path else None


def _not_user_prefixes() -> tuple[str, ...]:
    paths = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            paths.add(sysconfig.get_paths()[key])
        except KeyError:
            pass
    try:
        paths.update(site.getsitepackages())
        paths.add(site.getusersitepackages())
    except AttributeError:  # some embedded interpreters have no site functions
        pass
    for module in ("jax", "jaxlib", "explorer"):  # editable installs live outside site-packages
        if (d := _package_dir(module)) is not None:
            paths.add(d)
    return tuple(sorted(os.path.abspath(p).rstrip(os.sep) + os.sep for p in paths if p))


_PREFIXES: tuple[str, ...] | None = None
_USER: dict[str, bool] = {}  # file name -> is_user_file, asked once per file


def is_user_file(filename: str | None) -> bool:
    """The file is the user's: not JAX's, the explorer's, the standard library's or an
    installed package's. Code without a file (``<stdin>``, a notebook cell) is the user's."""
    global _PREFIXES
    if not filename:
        return False
    if (known := _USER.get(filename)) is not None:
        return known
    if filename.startswith("<"):
        return not filename.startswith("<frozen")
    if _PREFIXES is None:
        _PREFIXES = _not_user_prefixes()
    if len(_USER) > 10_000:  # a program that writes code to new files without end
        _USER.clear()
    known = _USER[filename] = not os.path.abspath(filename).startswith(_PREFIXES)
    return known


def _at(filename: str, line: int | None) -> str:
    return f"{filename}:{line}" if line else filename


def _entered(frame: FrameType | None) -> tuple[FrameType | None, FrameType | None]:
    """Walk out from ``frame``: the first user frame, and the library frame it entered (the
    one just inside it; ``None`` where the user frame is ``frame`` itself, or there is none)."""
    inner = None
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return frame, inner
        inner = frame
        frame = frame.f_back
    return None, None


def user_frame(frame: FrameType | None, *, call: bool = False
               ) -> tuple[str | None, str | None, CallSignature | None]:
    """Walk out from ``frame``: the first user frame's ``file:line``; the user's definition of
    the callable the library was entered through, when that is the user's (a
    ``functools.wraps`` wrapper such as ``eqx.filter_jit``'s, through ``__wrapped__``); and,
    with ``call=True``, the user's arguments to it (:func:`call_signature`), else ``None``."""
    user, inner = _entered(frame)
    if user is None:
        return None, None, None
    at = _at(user.f_code.co_filename, user.f_lineno)
    entry = _entry(inner)
    if entry is None:
        return at, None, None
    fn, before, before_kw = entry
    sig = _bound_signature(inner, fn, before, before_kw) if call else None
    return at, _at(fn.__code__.co_filename, fn.__code__.co_firstlineno), sig


def _entry(frame: FrameType | None) -> tuple[Any, tuple, dict] | None:
    """The user's function behind the wrapper a library frame was entered through (the frame's
    ``self``), with the arguments that partial layers (``functools.partial``, ``eqx.Partial``:
    a method's instance) put before the caller's; ``None`` unless that function is the user's."""
    if frame is None:
        return None
    obj = frame.f_locals.get("self")
    before: tuple = ()
    before_kw: dict = {}
    for _ in range(8):  # partial layers, outermost first
        func, args = getattr(obj, "func", None), getattr(obj, "args", None)
        if hasattr(obj, "__wrapped__") or not callable(func) or not isinstance(args, tuple):
            break
        before = args + before
        before_kw = {**(getattr(obj, "keywords", None) or {}), **before_kw}
        obj = func
    if obj is None or not hasattr(obj, "__wrapped__"):
        return None
    try:
        fn = inspect.unwrap(obj)
    except (ValueError, AttributeError):  # a cycle of __wrapped__, or one that raises
        return None
    code = getattr(fn, "__code__", None)
    if code is None or not is_user_file(code.co_filename):
        return None
    return fn, before, before_kw


@dataclasses.dataclass(frozen=True)
class UserCall:
    """The user's own call of a library's wrapper of their function (``nnx.jit``'s): the
    wrapper as the user called it and the arguments as the user passed them, for a diagnosis
    where the ``jax.jit`` call the library made cannot be replayed outside the library."""

    fn: Any
    args: tuple
    kwargs: dict


def user_call(frame: FrameType | None) -> UserCall | None:
    """Walk out from ``frame`` to the first user frame: the call it made of a library's
    wrapper of a user's function, read from the wrapper's frame (a plain ``*args, **kwargs``
    forwarding method of the object the user called); ``None`` otherwise."""
    _, inner = _entered(frame)
    if _entry(inner) is None:
        return None
    info = inspect.getargvalues(inner)
    if info.varargs is None or any(a not in ("self", "cls") for a in info.args):
        return None
    kwargs = dict(info.locals.get(info.keywords) or {}) if info.keywords else {}
    return UserCall(inner.f_locals.get("self"), tuple(info.locals.get(info.varargs) or ()),
                    kwargs)


# -- the user's arguments, for a function a library wraps ------------------------------------
# A library's jit (``eqx.filter_jit``) hands JAX arguments of its own (``dynamic_nodonate``,
# ``static``), and JAX's explanation names those. The user's own call is read from the frame
# that entered the library (its ``*args, **kwargs``), bound to the user's function's
# parameters, and kept as types: an array leaf as its type, any other leaf as its value.
CallSignature = tuple  # ((parameter, PyTreeDef, (leaf, ...), (path, ...) or None), ...)


def _bound_signature(frame: FrameType, fn: Any, before: tuple,
                     before_kw: dict) -> CallSignature | None:
    try:
        info = inspect.getargvalues(frame)
        if info.varargs is None or any(a not in ("self", "cls") for a in info.args):
            return None  # not a plain forwarding wrapper: its arguments are not the user's
        args = tuple(info.locals.get(info.varargs) or ())
        kwargs = dict(info.locals.get(info.keywords) or {}) if info.keywords else {}
        bound = inspect.signature(fn).bind(*before, *args, **before_kw, **kwargs)
        bound.apply_defaults()
        return call_signature(bound.arguments)
    except Exception:  # noqa: BLE001 - a call that does not bind keeps JAX's own words
        return None


def call_signature(arguments: dict[str, Any]) -> CallSignature:
    """Each argument's tree structure, leaves and their paths: an array leaf as ``("array",
    its type)``, any other leaf as ``("value", the value)``; the paths read from the argument
    itself (a flax.nnx module's are its attributes', ``model.drift['a'].value``: rebuilt from
    its structure alone, it names its graph's states), ``None`` where it gives none."""
    out = []
    for name, value in arguments.items():
        leaves, treedef = jax.tree_util.tree_flatten(value)
        try:
            paths = tuple(name + jax.tree_util.keystr(p)
                          for p, _ in jax.tree_util.tree_flatten_with_path(value)[0])
        except Exception:  # noqa: BLE001 - named from the structure when needed, as before
            paths = None
        if paths is not None and len(paths) != len(leaves):
            paths = None
        out.append((name, treedef, tuple(_leaf(x) for x in leaves), paths))
    return tuple(out)


def _leaf(x: Any) -> tuple[str, Any]:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        try:
            return "array", _aval(jax.typeof(x))     # weak type included: it keys a trace
        except Exception:  # noqa: BLE001 - array-like, but not a type JAX reads
            return "array", f"{x.dtype}{list(x.shape)}"
    return "value", x


def _same(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    if a[0] != b[0]:
        return False
    try:
        return a[1] is b[1] or bool(a[1] == b[1])
    except Exception:  # noqa: BLE001 - a value without a plain ==: the same object only
        return False


def _short(value: Any, limit: int = 40) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _leaf_paths(name: str, treedef: Any) -> list[str]:
    """``model.layers[0].weight``: each leaf's path into the argument ``name``."""
    try:
        tree = jax.tree_util.tree_unflatten(treedef, [0] * treedef.num_leaves)
        paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
        if len(paths) == treedef.num_leaves:
            return [name + jax.tree_util.keystr(p) for p in paths]
    except Exception:  # noqa: BLE001 - a node that cannot be rebuilt from placeholders
        pass
    return [f"{name} leaf {i}" for i in range(treedef.num_leaves)]


def _tree_difference(now: Any, before: Any, around: int = 24) -> str:
    """``is …(3, 2, 4…, was …(2, 2, 4…``: the two structures where they first differ."""
    a, b = str(now), str(before)
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, i - around)

    def cut(t: str) -> str:
        end = i + around
        return ("…" if start else "") + t[start:end] + ("…" if end < len(t) else "")
    return f"is {cut(a)}, was {cut(b)}"


def call_change(before: CallSignature | None, now: CallSignature | None) -> str | None:
    """What differs between two calls of the same function, in one line, named by the user's
    parameters and the paths into them; ``None`` when nothing does."""
    if before is None or now is None:
        return None
    earlier = {name: (treedef, leaves) for name, treedef, leaves, _ in before}
    changes: list[tuple[str, str]] = []
    for name, treedef, leaves, paths in now:
        if name not in earlier:
            continue
        treedef_b, leaves_b = earlier[name]
        if treedef != treedef_b:
            changes.append(("argument structure", f"{name} {_tree_difference(treedef, treedef_b)}"))
            continue
        for i, (x, y) in enumerate(zip(leaves, leaves_b)):
            if _same(x, y):
                continue
            paths = paths or _leaf_paths(name, treedef)
            if x[0] == y[0] == "array":
                changes.append(_type_change(paths[i], x[1], y[1]))
            elif x[0] == y[0] == "value":
                changes.append(("static argument",
                                f"{paths[i]} is {_short(x[1])}, was {_short(y[1])}"))
            else:
                now_s = x[1] if x[0] == "array" else _short(x[1])
                was_s = y[1] if y[0] == "array" else _short(y[1])
                changes.append(("type", f"{paths[i]} is {now_s}, was {was_s}"))
    if not changes:
        return None
    kinds = list(dict.fromkeys(k for k, _ in changes))  # each kind once, in order
    return _one_line("; ".join(_listing(k, [c for kind, c in changes if kind == k])
                               for k in kinds))


# -- JAX's tracing-cache-miss explanation, in one line ---------------------------------------
@dataclasses.dataclass(frozen=True)
class Explanation:
    """What one ``TRACING CACHE MISS`` message says."""

    name: str | None
    definition: str | None  # "file:line" as JAX gives it
    reason: str | None  # None: a function JAX had never seen (a first compile)
    never_seen: bool = False  # JAX had never seen this function object


_NAME_RE = re.compile(r"^\s*(?:for (\S+) defined|(\S+) id=\d+)", re.MULTILINE)
_DEFINED_RE = re.compile(r"defined at (.+?):(\d+)\s*$", re.MULTILINE)
_TYPE_RE = re.compile(r"\* at (.+?), now (\S+) and before (\S+?)(?:https?://\S+)?\s*$", re.MULTILINE)
_STATIC_RE = re.compile(r"\* at input path (\S+), now .*?Static\(val=(.*?)\) and before .*?"
                        r"Static\(val=(.*?)\), so")
_TREE_RE = re.compile(r"\* at input path (\S+), now (.+?) and before (.+?), so (.*)$", re.MULTILINE)
_CONTEXT_RE = re.compile(r"\* (\S+) differs: now (.*?) and before (.*)$", re.MULTILINE)
_ARG_PATH_RE = re.compile(r"^\[0\]\[(\d+)\](.*)$|^\[1\]\['([^']+)'\](.*)$")


def explain(message: str) -> Explanation:
    """Read a ``TRACING CACHE MISS`` message (jax 0.10's wording; anything it cannot read
    becomes the message's own words, cut to one line)."""
    name = None
    if m := _NAME_RE.search(message):
        name = m.group(1) or m.group(2)
    definition = None
    if m := _DEFINED_RE.search(message):
        definition = f"{m.group(1)}:{m.group(2)}"
    if "never seen function" in message:
        reason = None
        if "re-defined repeatedly" in message:
            reason = ("new function object each call: it is defined again every time, so JAX's "
                      "cache of the earlier one never applies (define it once, outside the loop)")
        return Explanation(name, definition, reason, never_seen=True)
    return Explanation(name, definition, _one_line(_why(message)))


def _arg(path: str) -> str:
    """``[0][1]`` (JAX's path into ``(args, kwargs)``) as ``args[1]``; ``[1]['n']`` as ``n``."""
    m = _ARG_PATH_RE.match(path)
    if not m:
        return path
    if m.group(1) is not None:
        return f"args[{m.group(1)}]{m.group(2)}"
    return f"{m.group(3)}{m.group(4)}"


def _short_type(t: str) -> str:
    t = re.sub(r"\(\{.*?\}\)$", "", t)  # a sharding suffix, "f32[3]({})"
    return t


def _type_change(name: str, now: str, before: str) -> tuple[str, str]:
    now_s, before_s = _short_type(now), _short_type(before)
    kind = "type"
    dn, _, sn = now_s.partition("[")
    db, _, sb = before_s.partition("[")
    if ("weak_type" in now_s + before_s
            and now_s.replace(_WEAK, "") == before_s.replace(_WEAK, "")):
        kind = "weak type"
    elif dn == db and sn != sb:
        kind = "shape"
    elif dn != db and sn == sb:
        kind = "dtype"
    return kind, f"{name} is {now_s}, was {before_s}"


_WEAK = "{weak_type=True}"
# A weakly typed array (from a Python number: jnp.array(0.01)) and a typed one of the same
# dtype and shape key different traces; a parameter made so compiles again after its first
# update, its optimizer's state after the next.
_WEAK_HINT = (" (weakly typed: made from a Python number; give it a dtype where it is made, "
              "jnp.asarray(x, jnp.float32))")


def _listing(kind: str, items: list[str]) -> str:
    shown = 1 if kind == "weak type" else 2      # and the hint, in one line
    more = f" (+{len(items) - shown} more)" if len(items) > shown else ""
    return (f"{kind} changed: " + "; ".join(items[:shown]) + more
            + (_WEAK_HINT if kind == "weak type" else ""))


def _why(message: str) -> str:
    if "different input types" in message:
        changes = [_type_change(*m.groups()) for m in _TYPE_RE.finditer(message)]
        if changes:
            kinds = {k for k, _ in changes}
            kind = kinds.pop() if len(kinds) == 1 else "type"
            return _listing(kind, [c for _, c in changes])
    if "different input pytree" in message:
        statics = [f"{_arg(p)} is {now}, was {before}"
                   for p, now, before in _STATIC_RE.findall(message)]
        if statics:
            return _listing("static argument", statics)
        trees = [f"{_arg(p)} is {_plain(now)}, was {_plain(before)} ({so})"
                 for p, now, before, so in _TREE_RE.findall(message)]
        if trees:
            return _listing("argument structure", trees)
    if "Tracing context doesn't match" in message:
        ctx = [f"{n} is {now}, was {before}" for n, now, before in _CONTEXT_RE.findall(message)]
        return _listing("tracing context (a config option or context manager)", ctx) if ctx \
            else "tracing context changed (a config option or context manager)"
    if "Debug info doesn't match" in message:
        return "argument names changed (JAX: debug info doesn't match)"
    if "explanation unavailable" in message:
        return "compiled again; JAX has no explanation for this cache miss"
    body = [ln.strip() for ln in message.splitlines()[1:]
            if ln.strip() and not ln.strip().startswith(("for ", "all previously"))]
    return " ".join(body) or "compiled again"


def _plain(thing: str) -> str:
    return re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", r"\1", thing)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON else text[:MAX_REASON - 1] + "…"


# -- what a jax.jit trace was keyed on, and what changed since ------------------------------
# JAX's tracing cache keys a trace on the function object, the arguments' types and tree
# structure, the static arguments' values and the tracing context. The watch keeps the first
# three of each trace (from the trace itself, ``compat.jit_trace_in_progress``) and words what
# changed when the records are read, so a recompile costs the program nothing more than the
# trace. (``jax_explain_cache_misses`` does the same inside tracing, comparing each miss with
# every key its cache holds for the whole process: its cost grows with every trace.) The
# tracing context is not public: a recompile with nothing else changed is said to be one.
@dataclasses.dataclass(frozen=True)
class TraceKey:
    """What one ``jax.jit`` trace was keyed on, as far as the watch reads it."""

    fun: Any  # a weak reference to the traced function (None where it takes none)
    names: tuple[str, ...]  # each array argument's path (``params['w']``, ``x``)
    avals: tuple[Any, ...]  # and its type
    statics: tuple[tuple[int | str, Any], ...]  # (position or name, value) of static arguments


def trace_key(jt: Any) -> TraceKey:
    """The key of a trace read by ``compat.jit_trace_in_progress``."""
    avals = tuple(jt.jaxpr.in_avals)
    names = getattr(getattr(jt.jaxpr.jaxpr, "debug_info", None), "arg_names", None)
    if not isinstance(names, tuple) or len(names) != len(avals) or None in names:
        names = tuple(f"arg {i}" for i in range(len(avals)))
    n = len(jt.args)
    statics: list[tuple[int | str, Any]] = [
        (i % n, jt.args[i % n]) for i in jt.static_argnums if n and -n <= i < n]
    statics += [(k, jt.kwargs[k]) for k in jt.static_argnames if k in jt.kwargs]
    try:
        ref = weakref.ref(jt.fun)
    except TypeError:  # a callable that takes no weak reference
        ref = None
    return TraceKey(ref, names, avals, tuple(statics))


def definition_of(fun: Any) -> str | None:
    """``file:line`` of a function's definition, through ``functools.wraps`` and
    ``functools.partial`` layers (as JAX finds it for its own messages)."""
    for _ in range(32):
        if isinstance(fun, functools.partial):
            fun = fun.func
        elif (inner := getattr(fun, "__wrapped__", None)) is not None:
            fun = inner
        else:
            break
    code = getattr(fun, "__code__", None)
    return _at(code.co_filename, code.co_firstlineno) if code is not None else None


def _aval(a: Any) -> str:
    try:
        text = a.str_short(short_dtypes=True)
    except Exception:  # noqa: BLE001 - a type of another kind: its own words
        return str(a)
    return text + "{weak_type=True}" if getattr(a, "weak_type", False) else text


def _static_name(where: int | str, fun: Any) -> str:
    if isinstance(where, str):
        return where
    try:
        params = list(inspect.signature(fun).parameters.values())
        if where < len(params) and params[where].kind in (
                inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            return params[where].name
    except (TypeError, ValueError):  # a function without a signature (a builtin, say)
        pass
    return f"args[{where}]"


def _key_changes(now: TraceKey, before: TraceKey) -> list[tuple[str, str]]:
    changes: list[tuple[str, str]] = []
    if now.names != before.names:
        earlier, later = set(before.names), set(now.names)
        items = ([f"{n} is new" for n in now.names if n not in earlier]
                 + [f"{n} is gone" for n in before.names if n not in later])
        changes.append(("argument structure", "; ".join(items) or "the arguments' order"))
        # and what changed in the arguments both have (x[:2] of a matrix after a vector: one
        # index more, and the operand's shape)
        was = dict(zip(before.names, before.avals))
        common = [(n, a, was[n]) for n, a in zip(now.names, now.avals) if n in was]
    else:
        common = list(zip(now.names, now.avals, before.avals))
    for name, a, b in common:
        if a != b:
            now_s, was_s = _aval(a), _aval(b)
            if now_s == was_s:  # the same short type: a sharding, say
                now_s, was_s = str(a), str(b)
            changes.append(_type_change(name, now_s, was_s))
    statics_b = dict(before.statics)
    fun = now.fun() if now.fun is not None else None
    for where, value in now.statics:
        if where not in statics_b:
            continue
        old = statics_b[where]
        if not _same(("value", value), ("value", old)):
            changes.append(("static argument", f"{_static_name(where, fun)} is "
                                               f"{_short(value)}, was {_short(old)}"))
    return changes


def _weight(changes: list[tuple[str, str]]) -> int:
    """How far apart two keys are: a leaf whose shape and dtype both changed counts twice, and
    each leaf that is new or gone once."""
    return sum(2 if kind == "type" else
               len(text.split("; ")) if kind == "argument structure" else 1
               for kind, text in changes)


def key_change(now: TraceKey, earlier: list[TraceKey]) -> str | None:
    """What changed since the closest of the ``earlier`` keys of the same function (the one
    with the fewest differences, the latest of those), in one line; ``None`` when nothing
    did."""
    best: list[tuple[str, str]] | None = None
    for before in reversed(earlier):
        changes = _key_changes(now, before)
        if best is None or _weight(changes) < _weight(best):
            best = changes
        if not best:
            break
    if not best:
        return None
    kinds = list(dict.fromkeys(k for k, _ in best))
    return _one_line("; ".join(_listing(k, [c for kind, c in best if kind == k])
                               for k in kinds))
