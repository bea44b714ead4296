"""The packer's contact with JAX's primitives: which equations vectorise, evaluating one
equation, and the tags that let :func:`explorer.blame` charge each emitted equation to the
user's equation it computes.

What vectorises is decided in one place, :func:`vectorises`: JAX's own public ``jax.vmap`` of
the primitive, tried on abstract values with ``jax.eval_shape``. A pack of a primitive it
refuses is evaluated lane by lane by :mod:`.emit` (the numbers are the same, the program just
grows) and named in the report.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend import core as jex_core

__all__ = ["Origins", "bind", "eval_eqn", "scope_of", "tagging", "vectorises", "vectorises_eqn"]


# -- where each emitted equation comes from (for blame) ---------------------------------------
class Origins:
    """The user's equations behind the equations a packed program emitted while
    :func:`tagging` was on: each emitted equation is traced under ``jax.named_scope("pce<k>")``
    where ``k`` numbers the user's equation it computes (its pack's first member)."""

    def __init__(self):
        self.eqns: list = []
        self.holders: list[tuple] = []   # per tag: the calls holding its equation, innermost first
        self._index: dict[int, int] = {}

    def tag(self, eqn, holders: dict[int, Any] | None = None) -> str:
        k = self._index.get(id(eqn))
        if k is None:
            k = self._index[id(eqn)] = len(self.eqns)
            self.eqns.append(eqn)
            chain, held = [], (holders or {}).get(id(eqn))
            while held is not None and len(chain) < 64:
                chain.append(held)
                held = holders.get(id(held))
            self.holders.append(tuple(chain))
        return f"pce{k}"

    def _index_of(self, eqn) -> int | None:
        found = _TAG.findall(str(getattr(eqn.source_info, "name_stack", "")))
        return int(found[-1]) if found else None

    def origin_of(self, eqn):
        """The user's equation ``eqn`` was emitted for (the innermost tag), or ``None``."""
        k = self._index_of(eqn)
        return None if k is None else self.eqns[k]

    def holders_of(self, eqn) -> tuple:
        """The calls (``jit``, ``custom_vjp_call``...) whose bodies the packer inlined that held
        the user's equation ``eqn`` was emitted for, innermost first; ``()`` for none."""
        k = self._index_of(eqn)
        return () if k is None else self.holders[k]


_TAG = re.compile(r"\bpce(\d+)\b")
_TAGGING: contextvars.ContextVar[Origins | None] = contextvars.ContextVar("pce_tagging",
                                                                           default=None)


@contextlib.contextmanager
def tagging():
    """Within, packed programs traced here tag what they emit (see :class:`Origins`, yielded),
    so ``explorer.blame`` charges the packed program's equations to the user's lines. Off
    otherwise: a measured program carries no extra names in its HLO."""
    origins = Origins()
    token = _TAGGING.set(origins)
    try:
        yield origins
    finally:
        _TAGGING.reset(token)


def scope_of(eqn, holders: dict[int, Any] | None = None):
    origins = _TAGGING.get()
    if origins is None or eqn is None:
        return contextlib.nullcontext()
    return jax.named_scope(origins.tag(eqn, holders))


@functools.lru_cache(maxsize=4096)
def _probe(primitive, params, avals, in_axes) -> str | None:
    def bound(*args):
        return bind(primitive, dict(params), args)
    structs = [jax.ShapeDtypeStruct(s, d) for s, d in avals]
    try:
        jax.eval_shape(jax.vmap(bound, in_axes=in_axes), *structs)
    except Exception as e:  # noqa: BLE001 - any refusal means: evaluate lane by lane
        text = str(e).strip().splitlines()
        return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")
    if primitive.multiple_results or all(a is None for a in in_axes):
        return None
    # A rule may take a batch and give back one value for all of it: equinox's nonbatchable
    # (lane 0's value, after a run-time check that every lane holds the same), unvmap_any /
    # unvmap_max (a reduction over the batch). Lanes of different names are not one value.
    try:
        jax.eval_shape(jax.vmap(bound, in_axes=in_axes, out_axes=None), *structs)
    except Exception:  # noqa: BLE001 - its output is batched: one value per lane
        return None
    return "its jax.vmap gives one value for the whole batch, not one per lane"


def vectorises(eqn, in_axes, values) -> str | None:
    """Whether ``jax.vmap`` of ``eqn``'s primitive takes these (batched) operands.

    Returns ``None`` if it does, else the one-line reason it does not. Decided by JAX's public
    ``jax.vmap`` on abstract values (``jax.eval_shape``), cached per primitive, parameters,
    operand shapes and batched axes, instead of reading JAX's private table of batching rules.
    """
    try:
        params = tuple(sorted(eqn.params.items()))
        hash(params)
    except TypeError:
        params = None
    avals = tuple((tuple(jnp.shape(v)), jnp.result_type(v)) for v in values)
    if params is None:
        return _probe.__wrapped__(eqn.primitive, tuple(eqn.params.items()), avals, in_axes)
    return _probe(eqn.primitive, params, avals, in_axes)


def vectorises_eqn(eqn) -> str | None:
    """:func:`vectorises` for ``eqn`` with every operand batched (a pack of lanes that all
    read vectors): ``None`` if ``jax.vmap`` takes it, else the reason."""
    avals = [v.aval for v in eqn.invars]
    values = [jax.ShapeDtypeStruct((2, *a.shape), a.dtype) for a in avals]
    return vectorises(eqn, (0,) * len(values), values)


def bind(primitive, params, args):
    out = primitive.bind(*args, **params)
    return tuple(out) if primitive.multiple_results else out


_ONE_EQUATION = jex_core.DebugInfo("explorer.pack", "one equation", None, None)


def eval_eqn(eqn, values):
    """One equation on values, through public ``jaxpr_as_fun`` (it binds sub-programs)."""
    invars = [jex_core.Var(v.aval) if isinstance(v, jex_core.Literal) else v
              for v in eqn.invars]
    seen, unique_vars, unique_vals = set(), [], []
    for var, val in zip(invars, values):
        if var not in seen:
            seen.add(var)
            unique_vars.append(var)
            unique_vals.append(val)
    # JAX >= 0.12 deprecates a Jaxpr made without a DebugInfo (jax-ml/jax#26480); the public
    # jax.extend.core.DebugInfo names what this one-equation program was made for.
    jaxpr = jex_core.Jaxpr([], unique_vars, list(eqn.outvars), [eqn.replace(invars=invars)],
                           eqn.effects, debug_info=_ONE_EQUATION)
    return tuple(jex_core.jaxpr_as_fun(jex_core.ClosedJaxpr(jaxpr, []))(*unique_vals))
