"""Pass 0 of :func:`explorer.jit`'s packer: sibling loops become one loop.

A loop over names around a ``lax.scan`` (``for k in names: _, ys[k] = lax.scan(step_k, c[k],
xs[k])``) or a ``lax.while_loop`` (one ``diffrax.diffeqsolve`` per name) traces as one loop per
name, each on its own carry. The packer packs what happens *inside* a loop across the lanes of
its carry, never across separate loops, so such a program stayed one loop per name (and with the
stacking around them, bigger than ``jax.jit``'s).

This pass runs on each jaxpr the graph walks, before it is numbered; where two loops or
conditionals take operands of one type, through calls, it first inlines the calls (``jit``,
``custom_jvp``...: as the graph would), so the loops of one library call per name are siblings
too. Loops of which none reads another's outputs, directly or through other equations, are
merged when they loop alike:

- scans of the same length, direction and unroll and the same body signature (its inputs'
  shapes and dtypes, its primitives in order) become one ``lax.scan`` whose body runs each
  member's body on its own operands, side by side: independent loops of one length run in one
  loop compute every value exactly as before;
- while loops that are the same loop on other operands (the same cond and body) become one
  ``lax.while_loop`` that goes on while any member's cond holds, its body running each
  member's body and keeping a member's values once its own cond no longer holds: what
  ``jax.vmap`` makes of a while loop, each member's values those of its own loop (a finished
  member's body still runs, its results dropped, so loops that call back into Python, as
  equinox's ``error_if`` does, are left apart);
- conditionals that are the same conditional on other operands, none of whose branches loops
  or calls back, become every branch computed for each member and its own chosen
  (``lax.select_n``), as ``jax.vmap`` makes a cond whose index differs by member.

The packer then sees one loop whose carry holds every name, and packs its body across them, as
it does for a per-name carry. The equations that read the members' outputs are put after the
merged loop; nothing else moves. A jaxpr with an effect (a callback, a print) is left as it is:
merging could reorder what it does.

The merged loop is made with public APIs only: ``jax.lax.scan`` / ``jax.lax.while_loop`` traced
by ``jax.make_jaxpr``, each member's body evaluated by ``jax.extend.core.jaxpr_as_fun`` (which
keeps each equation's source line, for ``explorer.blame``).
"""

from __future__ import annotations

import functools
import heapq
import operator
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend import core as jex_core

from ..compat import scan_counts, scan_options

__all__ = ["call_body", "fuse_sibling_loops"]


def _key(eqn) -> tuple | None:
    """What members of one merged loop share; ``None`` for an equation that is not a loop
    this pass can merge."""
    if eqn.effects:
        return None
    if eqn.primitive.name == "while":
        return _while_key(eqn)
    if eqn.primitive.name == "cond":
        return _cond_key(eqn)
    if eqn.primitive.name != "scan":
        return None
    counts, options = scan_counts(eqn.params), scan_options(eqn.params)
    body = eqn.params.get("jaxpr")
    if counts is None or options is None or not isinstance(body, jex_core.ClosedJaxpr):
        return None
    return options, counts, _types(body.jaxpr.invars), _outline(body.jaxpr)


def _types(atoms) -> tuple:
    """Each atom's shape, dtype and weak type: what a loop's inputs must share to merge."""
    return tuple((tuple(a.aval.shape), str(a.aval.dtype), bool(getattr(a.aval, "weak_type",
                                                                       False)))
                 for a in atoms)


def _structs(eqns) -> list:
    """Abstract values of the operands of ``eqns``, in order: what a merged loop is traced on."""
    return [jax.ShapeDtypeStruct(a.aval.shape, a.aval.dtype,
                                 weak_type=getattr(a.aval, "weak_type", False))
            for e in eqns for a in e.invars]


def _outline(jaxpr) -> tuple:
    """A cheap outline of a body: its equations' primitives, in order."""
    return tuple(e.primitive.name for e in jaxpr.eqns)


def _while_key(eqn) -> tuple | None:
    """Sibling while loops merge only where they are the same loop on other operands (the
    same cond and body, constants included: see :func:`_exact`): see :func:`_merged_while`.
    This is the cheap part of the key."""
    cond, body = eqn.params.get("cond_jaxpr"), eqn.params.get("body_jaxpr")
    if not (isinstance(cond, jex_core.ClosedJaxpr) and isinstance(body, jex_core.ClosedJaxpr)):
        return None
    others = tuple(sorted((k, repr(v)) for k, v in eqn.params.items()
                          if k not in ("cond_jaxpr", "body_jaxpr")))
    return ("while", _types(eqn.invars), others, _outline(cond.jaxpr), _outline(body.jaxpr))


def _cond_key(eqn) -> tuple | None:
    """Sibling conditionals merge only where they are the same conditional on other operands
    (see :func:`_exact`) and no branch loops or calls back: each member then computes every
    branch and chooses its own (``lax.select_n``), what ``jax.vmap`` makes of a cond whose
    index differs by member. This is the cheap part of the key."""
    branches = eqn.params.get("branches")
    if not isinstance(branches, (tuple, list)) or not all(
            isinstance(b, jex_core.ClosedJaxpr) for b in branches):
        return None
    others = tuple(sorted((k, repr(v)) for k, v in eqn.params.items() if k != "branches"))
    return ("cond", _types(eqn.invars), others, tuple(_outline(b.jaxpr) for b in branches))


def _exact(eqn) -> tuple | None:
    """The costly part of a while loop's or conditional's key, asked only of those whose cheap
    part another shares: their sub-programs as JAX prints them (the same text: the same
    program), their constants by identity. ``None`` for a conditional a branch of which loops
    or calls back, and for a while loop whose cond or body calls back: merged, a branch runs
    on every member's values and a finished member's body runs on (its values kept), as
    under ``jax.vmap``, and a callback (equinox's ``error_if`` raises from one) must never
    see values its own program would not give it."""
    subs = ([eqn.params["cond_jaxpr"], eqn.params["body_jaxpr"]]
            if eqn.primitive.name == "while" else list(eqn.params["branches"]))
    if any(_calls_back(b.jaxpr) or (eqn.primitive.name == "cond" and _loops(b.jaxpr))
           for b in subs):
        return None
    return tuple(str(b.jaxpr) for b in subs), tuple(tuple(map(id, b.consts)) for b in subs)


def _calls_back(jaxpr) -> bool:
    """Whether ``jaxpr`` calls back into Python anywhere (``jax.pure_callback``: equinox's
    ``error_if`` raises from one in the branch its cond takes on an error, so that branch must
    never run on other values)."""
    return any("callback" in eqn.primitive.name
               or any(_calls_back(sub) for sub in jex_core.jaxprs_in_params(eqn.params))
               for eqn in jaxpr.eqns)


def _alike(eqns, seen: set) -> bool:
    """Whether two loops or conditionals among ``eqns`` and the bodies of their calls (not
    inside loops) take operands of the same types: the quick test before anything is inlined
    or compared (most programs have none, and pay only this walk)."""
    for eqn in eqns:
        name = eqn.primitive.name
        if name in ("scan", "while", "cond"):
            key = (name, _types(eqn.invars))
            if key in seen:
                return True
            seen.add(key)
        elif name in INLINE:
            body, _ = call_body(eqn)
            if body is not None and _alike(body.eqns, seen):
                return True
    return False


def _loops(jaxpr) -> bool:
    """Whether ``jaxpr`` loops anywhere inside (a scan or while loop, in any sub-program)."""
    return any(eqn.primitive.name in ("scan", "while")
               or any(_loops(sub) for sub in jex_core.jaxprs_in_params(eqn.params))
               for eqn in jaxpr.eqns)


def _groups(eqns) -> list[list[int]]:
    """Positions of the loops (and conditionals) to merge, groups of two or more, each in
    program order.

    One joins the open group of its key unless it reads (through any chain of equations) an
    output of that group's members; then it opens a new group of that key."""
    taint: dict[Any, int] = {}      # var -> bitset of the groups it was computed from
    open_group: dict[tuple, int] = {}
    members: list[list[int]] = []
    keys = [_key(eqn) for eqn in eqns]
    seen: dict[tuple, int] = {}
    for key in keys:
        if key is not None:
            seen[key] = seen.get(key, 0) + 1
    for pos, (eqn, key) in enumerate(zip(eqns, keys)):
        if key is not None and key[0] in ("while", "cond"):
            exact = _exact(eqn) if seen[key] > 1 else None
            key = None if exact is None else (key, exact)
        reads = 0
        for atom in eqn.invars:
            if isinstance(atom, jex_core.Var):
                reads |= taint.get(atom, 0)
        if key is not None:
            g = open_group.get(key)
            if g is None or reads >> g & 1:
                g = open_group[key] = len(members)
                members.append([])
            members[g].append(pos)
            reads |= 1 << g
        if reads:
            for var in eqn.outvars:
                taint[var] = reads
    return [m for m in members if len(m) > 1]


def _merged_while(loops) -> jex_core.ClosedJaxpr:
    """The loop of ``loops`` (all the same loop) run once for all of them, inputs and outputs
    as :func:`_merged`'s: one ``lax.while_loop`` going on while any member's cond holds, whose
    body runs each member's body on its own carry and keeps a member's values once its cond no
    longer holds (what ``jax.vmap`` makes of a while loop, written member by member: the packer
    packs the members' alike bodies and choices across them, and a loop inside a member's body
    stays that member's)."""
    first, n = loops[0], len(loops)
    nc, nb = first.params["cond_nconsts"], first.params["body_nconsts"]
    cond = jex_core.jaxpr_as_fun(first.params["cond_jaxpr"])
    body = jex_core.jaxpr_as_fun(first.params["body_jaxpr"])
    size = len(first.invars)

    def run(*operands):
        own = [operands[m * size:(m + 1) * size] for m in range(n)]

        def going(carries):
            return [cond(*o[:nc], *c)[0] for o, c in zip(own, carries)]

        def any_going(carries):  # an add chain: the packer sums it in one reduction
            return functools.reduce(operator.add, [g.astype(jnp.int32)
                                                   for g in going(carries)]) > 0

        def step(carries):
            out = []
            for o, c, on in zip(own, carries, going(carries)):
                new = body(*o[nc:nc + nb], *c)
                out.append([jnp.where(on, v, old) for v, old in zip(new, c)])
            return out

        final = jax.lax.while_loop(any_going, step, [list(o[nc + nb:]) for o in own])
        return [v for carry in final for v in carry]

    return jax.make_jaxpr(run)(*_structs(loops))


def _merged_cond(conds) -> jex_core.ClosedJaxpr:
    """The conditional of ``conds`` (all the same) as every branch computed for each member
    and the member's own chosen by ``lax.select_n``: inputs and outputs as :func:`_merged`'s."""
    branches = [jex_core.jaxpr_as_fun(b) for b in conds[0].params["branches"]]
    size = len(conds[0].invars)

    def run(*operands):
        out = []
        for m in range(len(conds)):
            index, *args = operands[m * size:(m + 1) * size]
            results = [branch(*args) for branch in branches]
            out += [jax.lax.select_n(index, *cases) for cases in zip(*results)]
        return out

    return jax.make_jaxpr(run)(*_structs(conds))


def _merged(scans) -> jex_core.ClosedJaxpr:
    """One ``lax.scan`` running ``scans``' bodies side by side: its inputs are each member's
    operands in order, its outputs each member's outputs in order."""
    if scans[0].primitive.name == "while":
        return _merged_while(scans)
    if scans[0].primitive.name == "cond":
        return _merged_cond(scans)
    counts = [scan_counts(e.params) for e in scans]
    length, reverse, unroll = scan_options(scans[0].params)
    sizes = [len(e.invars) for e in scans]
    bodies = [jex_core.jaxpr_as_fun(e.params["jaxpr"]) for e in scans]

    def run(*operands):
        consts, init, xs, start = [], [], [], 0
        for size, (nc, nk) in zip(sizes, counts):
            own = operands[start:start + size]
            start += size
            consts.append(own[:nc])
            init.append(list(own[nc:nc + nk]))
            xs.append(list(own[nc + nk:]))

        def body(carry, x):
            carries, ys = [], []
            for run_body, c, k, y, (_, nk) in zip(bodies, consts, carry, x, counts):
                out = run_body(*c, *k, *y)
                carries.append(list(out[:nk]))
                ys.append(list(out[nk:]))
            return carries, ys

        final, ys = jax.lax.scan(body, init, xs, length=length, reverse=reverse,
                                 unroll=unroll)
        return [v for c, y in zip(final, ys) for v in (*c, *y)]

    return jax.make_jaxpr(run)(*_structs(scans))


# Calls whose body is inlined (the packed program is never differentiated again: their forward
# programs compute the same values), and the parameter that holds the body.
INLINE = {"pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr",
          "core_call": "call_jaxpr", "custom_jvp_call": "call_jaxpr",
          "custom_vjp_call": "call_jaxpr", "custom_vjp_call_jaxpr": "fun_jaxpr",
          "remat2": "jaxpr", "checkpoint": "jaxpr", "remat": "jaxpr", "custom_lin": None}


def call_body(eqn) -> tuple[Any, tuple]:
    """The body jaxpr and constants of a call to inline (the graph's and this pass's one
    rule), else ``(None, ())``."""
    key = INLINE.get(eqn.primitive.name)
    inner = eqn.params.get(key) if key and not eqn.effects else None
    body = inner.jaxpr if isinstance(inner, jex_core.ClosedJaxpr) else inner
    if not isinstance(body, jex_core.Jaxpr):
        return None, ()
    return body, tuple(inner.consts) if isinstance(inner, jex_core.ClosedJaxpr) else ()


def _flatten(jaxpr) -> tuple[list, list, list, dict[int, Any]]:
    """``jaxpr`` with every call inlined, as the graph inlines them (loops' bodies stay
    theirs): ``(eqns, outvars, consts, holders)``, ``holders`` the call that held each inlined
    equation (by ``id``; blame charges an equation without a user line to its call's line).
    The equations of an inlined body get new variables (one body can be called twice)."""
    consts: list = []
    holders: dict[int, Any] = {}

    def walk(eqns, env, holder, out):
        for eqn in eqns:
            invars = [env.get(a, a) if isinstance(a, jex_core.Var) else a for a in eqn.invars]
            body, values = call_body(eqn)
            if body is not None:
                if holder is not None:
                    holders[id(eqn)] = holder
                inner = {}
                for var, value in zip(body.constvars, values):
                    inner[var] = jex_core.Var(var.aval)
                    consts.append((inner[var], value))
                inner.update(zip(body.invars, invars))
                walk(body.eqns, inner, eqn, out)
                for var, result in zip(eqn.outvars, body.outvars):
                    env[var] = inner.get(result, result) if isinstance(
                        result, jex_core.Var) else result
                continue
            if holder is None:      # the top level: the same equation where nothing changed
                if any(a is not b for a, b in zip(invars, eqn.invars)):
                    eqn = eqn.replace(invars=invars)
            else:
                outvars = []
                for var in eqn.outvars:
                    if isinstance(var, jex_core.DropVar):
                        outvars.append(var)
                    else:
                        env[var] = jex_core.Var(var.aval)
                        outvars.append(env[var])
                eqn = eqn.replace(invars=invars, outvars=outvars)
                holders[id(eqn)] = holder
            out.append(eqn)
        return out

    env: dict = {}
    eqns = walk(jaxpr.eqns, env, None, [])
    outvars = [env.get(a, a) if isinstance(a, jex_core.Var) else a for a in jaxpr.outvars]
    return eqns, outvars, consts, holders


def fuse_sibling_loops(jaxpr) -> tuple[list, list, list, dict[int, int], dict[int, Any]]:
    """``(eqns, outvars, consts, merged, holders)``: ``jaxpr``'s equations with its calls
    inlined where that lets sibling loops merge, and its sibling loops merged (see the module
    docstring); its outputs (a member's output replaced by the merged loop's); ``(var, value)``
    pairs for the constants the inlined bodies and merged loops hold; per merged loop equation
    (by ``id``) how many loops it runs; and the call that held each inlined equation (by
    ``id``). ``jaxpr``'s own equations and outputs, unchanged, when there is nothing to
    merge."""
    eqns = list(jaxpr.eqns)
    unchanged = eqns, list(jaxpr.outvars), [], {}, {}
    if any(e.effects for e in eqns) or not _alike(eqns, set()):
        return unchanged
    outvars, consts, holders = list(jaxpr.outvars), [], {}
    if any(call_body(e)[0] is not None for e in eqns):
        eqns, outvars, consts, holders = _flatten(jaxpr)
        if any(e.effects for e in eqns):
            return unchanged
    groups = _groups(eqns)
    if not groups:     # inlined or not, as the graph would inline it (and not again, below)
        return eqns, outvars, consts, {}, holders
    # Items to order: each equation, a group standing for its members (at its first).
    item_of = list(range(len(eqns)))
    for group in groups:
        for pos in group:
            item_of[pos] = group[0]
    made: dict[Any, int] = {}
    for pos, eqn in enumerate(eqns):
        for var in eqn.outvars:
            made[var] = item_of[pos]
    needs: dict[int, set[int]] = {}
    for pos, eqn in enumerate(eqns):
        item = item_of[pos]
        deps = needs.setdefault(item, set())
        for atom in eqn.invars:
            if isinstance(atom, jex_core.Var) and atom in made and made[atom] != item:
                deps.add(made[atom])
    users: dict[int, list[int]] = {}
    for item, deps in needs.items():
        for dep in deps:
            users.setdefault(dep, []).append(item)
    waiting = {item: len(deps) for item, deps in needs.items()}
    ready = [item for item, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    by_first = {group[0]: group for group in groups}
    sub: dict[Any, Any] = {}
    out: list = []
    merged_counts: dict[int, int] = {}
    done = 0

    def renamed(atoms):
        return [sub.get(a, a) if isinstance(a, jex_core.Var) else a for a in atoms]

    def keep(eqn):
        invars = renamed(eqn.invars)
        # the same equation object where nothing changed (blame finds its holder by it)
        changed = any(a is not b for a, b in zip(invars, eqn.invars))
        out.append(eqn.replace(invars=invars) if changed else eqn)

    while ready:
        item = heapq.heappop(ready)
        if item in by_first:
            members = [eqns[pos] for pos in by_first[item]]
            merged = _merged(members)
            inner = dict(zip(merged.jaxpr.invars,
                             renamed([a for e in members for a in e.invars])))
            consts.extend(zip(merged.jaxpr.constvars, merged.consts))
            for eqn in merged.jaxpr.eqns:
                eqn = eqn.replace(invars=[inner.get(a, a) if isinstance(a, jex_core.Var)
                                          else a for a in eqn.invars])
                if eqn.primitive.name in ("scan", "while"):  # the first member's user line
                    eqn = eqn.replace(source_info=members[0].source_info)
                    merged_counts[id(eqn)] = len(members)
                out.append(eqn)
            results = [inner.get(a, a) if isinstance(a, jex_core.Var) else a
                       for a in merged.jaxpr.outvars]
            for var, value in zip([v for e in members for v in e.outvars], results):
                sub[var] = value
        else:
            keep(eqns[item])
        done += 1
        for user in users.get(item, ()):
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    if done != len(waiting):    # not every equation placed: never the case, never guessed
        return unchanged
    return out, renamed(outvars), consts, merged_counts, holders
