"""What :mod:`.findings` tells the user to write: the remedies of the per-leaf findings, each a
sentence and a before/after example."""

# A ``lax.cond`` per name on the name's own value: jax.jit keeps one conditional per name.
# explorer.jit computes both branches for every name and chooses each name's own, as jax.vmap
# does with a cond whose predicate is batched, unless a branch loops or calls back (it never
# runs such a branch on values its own cond would not give it): then only jnp.where helps.
COND = (
    "Compile it with explorer.jit, which computes both branches for every name at once and "
    "chooses each name's own (what jax.vmap makes of such a cond), in one array; or choose with "
    "jnp.where yourself, which does the same under jax.jit. Where a branch loops (a "
    "while_loop, a solve) or calls back into Python (equinox's error_if), explorer.jit keeps "
    "one conditional per name, as jax.jit does: use jnp.where there only if that branch is "
    "affordable for every name, and keep lax.cond where one predicate chooses for all names.\n\n"
    "# before: one conditional per name\n"
    "new = {k: lax.cond(s[k] > 1.0, lambda v: v - 0.5, lambda v: 2.0 * v, s[k]) for k in s}\n"
    "# after: the same step, compiled packed\n"
    "new = explorer.jit(step)(s)\n"
    "# or both branches, one choice per name, under jax.jit too\n"
    "new = {k: jnp.where(s[k] > 1.0, s[k] - 0.5, 2.0 * s[k]) for k in s}")


PACK = (
    "Compute every name at once on one array: compile the function with explorer.jit instead "
    "of jax.jit (a drop-in whose program does not grow with the leaves), let explorer.pack "
    "rewrite a per-name step (its output shaped like its first argument), or hold the state as "
    "an explorer.NamedArray and write the step group-wise.\n\n"
    "# before: one set of equations per name\n"
    "new = {k: 0.999 * s[k] + 1e-3 * p[k] for k in s}\n"
    "# after: the same function, compiled packed\n"
    "new = explorer.jit(step)(s, p)\n"
    "# or the step packed once, outside jit\n"
    "packed = explorer.pack(step, s, p)\n"
    "x, theta = packed.pack_args(s, p)\n"
    "new = packed.unpack(jax.jit(packed)(x, theta))\n"
    "# or group-wise, one set for the whole group\n"
    "new = s.replace(x=0.999 * s[\"x\"] + 1e-3 * p[\"rate\"])")

SUM = (
    "Reduce once over one array instead of adding the leaves one by one: hold the values as "
    "one array (an explorer.NamedArray, or jax.flatten_util.ravel_pytree once, outside jit) "
    "and call jnp.sum on it.\n\n"
    "# before: one set of equations and one add per name\n"
    "total = sum(0.9 * s[k] + 0.1 * p[k] for k in s)\n"
    "# after: the names stacked once, outside jit; one reduction inside\n"
    "x, _ = jax.flatten_util.ravel_pytree(s)\n"
    "theta, _ = jax.flatten_util.ravel_pytree(p)\n"
    "total = jnp.sum(0.9 * x + 0.1 * theta)")

LIBRARY = (
    "Give the library one array instead of a pytree of many leaves: flatten the state once "
    "(jax.flatten_util.ravel_pytree, or hold it as an explorer.NamedArray) and let the "
    "function you pass it work on that array (explorer.pack rewrites a per-name function for "
    "you).\n\n"
    "# before (for example an ODE solve): a dict of N leaves through the solver\n"
    "sol = diffrax.diffeqsolve(diffrax.ODETerm(f), solver, t0, t1, dt0, y0)\n"
    "# after: one array through the solver\n"
    "flat0, unravel = jax.flatten_util.ravel_pytree(y0)\n"
    "def f_flat(t, y, args):\n"
    "    return jax.flatten_util.ravel_pytree(f(t, unravel(y), args))[0]\n"
    "sol = diffrax.diffeqsolve(diffrax.ODETerm(f_flat), solver, t0, t1, dt0, flat0)")

CALL_PER_NAME = (
    "Call the library once for all names: stack the names' values into one array and jax.vmap "
    "the call over it (one copy of the library's program, whatever the number of names), or "
    "pass the library the whole pytree where it takes one (one diffrax solve of a dict state). "
    "explorer.jit runs such calls' loops as one where they are the same loop on other values, "
    "but keeps what each call checks (equinox's error_if) one per name.\n\n"
    "# before: one solve per name\n"
    "ys = {k: diffrax.diffeqsolve(term, solver, t0, t1, dt0, y0[k], args=rates[k]).ys\n"
    "      for k in y0}\n"
    "# after: one solve, vmapped over the names stacked\n"
    "names = list(y0)\n"
    "def solve(y, rate):\n"
    "    return diffrax.diffeqsolve(term, solver, t0, t1, dt0, y, args=rate).ys\n"
    "stacked = jax.vmap(solve)(jnp.stack([y0[k] for k in names]),\n"
    "                         jnp.stack([rates[k] for k in names]))\n"
    "ys = dict(zip(names, stacked))")
