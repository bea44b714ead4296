"""measure(): cold, stage by stage, provably so (even under a persistent compilation cache)."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _support import CPU_ENV, ROOT
from jax import lax

import explorer


def _user_fn(x, w):
    return jnp.sum(jnp.tanh(x @ w))


def test_measure_user_function_reports_stages_sizes_and_metadata():
    x, w = jnp.ones((8, 4)), jnp.ones((4, 3))
    m = explorer.measure(_user_fn, x, w, runs=3)
    assert m.name == "_user_fn"
    for stage in (m.trace_s, m.lower_s, m.compile_s, m.first_run_s, m.run_s):
        assert stage > 0
    assert m.n_leaves == 2
    # sizes are what JAX itself reports
    lowered = jax.jit(_user_fn).lower(x, w)
    assert m.hlo_pre_bytes == len(lowered.as_text())
    # The optimised HLO text carries a table of the caller's stack frames, so its length
    # depends a little on where compile() was called from; the program part is the same.
    bare_post = len(lowered.compile().as_text())
    assert abs(m.hlo_post_bytes - bare_post) < 0.2 * bare_post
    assert m.jaxpr_eqns == m.jaxpr_eqns_top == len(jax.make_jaxpr(_user_fn)(x, w).eqns)
    assert m.flops is not None and m.flops > 0  # the CPU backend gives a cost analysis
    assert m.backend == jax.default_backend()
    assert m.jax_version == jax.__version__
    assert m.repeats == 1 and m.compile_s_spread is None
    # Memory analysis only when asked for, and then what XLA reports.
    assert m.temp_bytes is None and m.generated_code_bytes is None
    with_memory = explorer.measure(_user_fn, x, w, runs=1, memory=True)
    stats = lowered.compile().memory_analysis()
    assert with_memory.argument_bytes == stats.argument_size_in_bytes == (8 * 4 + 4 * 3) * 4
    assert with_memory.output_bytes == stats.output_size_in_bytes > 0


def test_measure_counts_equations_inside_scan_bodies():
    def rollout(c):
        return lax.scan(lambda c, _: (jnp.sin(c) * 2 + 1, c), c, None, length=5)[1].sum()

    m = explorer.measure(rollout, jnp.ones(3))
    assert m.jaxpr_eqns_top < m.jaxpr_eqns  # the three body ops live inside the scan
    assert m.jaxpr_eqns == m.jaxpr_eqns_top + 3


def test_repeated_measures_are_each_cold():
    x, w = jnp.ones((8, 4)), jnp.ones((4, 3))
    results = [explorer.measure(_user_fn, x, w, repeats=2, runs=1) for _ in range(2)]
    for m in results:
        assert m.backend_compiles >= 2  # XLA compiled on every repeat...
        assert m.cache_hits == 0  # ...and nothing came from a cache
        assert m.cold
        assert m.compile_s_spread is not None and m.compile_s_spread >= 0


def test_measure_static_argnums_and_bad_options():
    def scaled(k, x):
        return jnp.sum(x * k)

    def scaled_last(x, k):
        return jnp.sum(x * k)

    m = explorer.measure(scaled, 3, jnp.ones(4), static_argnums=0)
    assert m.n_leaves == 1
    with pytest.raises(ValueError, match="repeats must be an integer between 1 and"):
        explorer.measure(scaled, 3, jnp.ones(4), static_argnums=0, repeats=0)
    with pytest.raises(ValueError, match="backend 'nope' is not available"):
        explorer.measure(_user_fn, jnp.ones((2, 2)), jnp.ones((2, 2)), backend="nope")
    # negative positions count from the end, as in jax.jit; out of range is one line
    assert explorer.measure(scaled_last, jnp.ones(4), 3, static_argnums=-1, runs=1).n_leaves == 1
    with pytest.raises(ValueError, match="static_argnums must name positions"):
        explorer.measure(scaled, 3, jnp.ones(4), static_argnums=-3)
    with pytest.raises(ValueError, match="backend must be a name"):
        explorer.measure(scaled, 3, jnp.ones(4), static_argnums=0, backend=123)


def test_measure_case_labels_and_grad_is_bigger_than_loss():
    case = explorer.build_case("decay", "dict", 4, 10)
    loss = explorer.measure_case(case, "loss")
    grad = explorer.measure_case(case, "grad")
    assert loss.name == "decay/dict/N=4/H=10/loss"
    assert grad.hlo_pre_bytes > loss.hlo_pre_bytes
    assert loss.n_leaves == case.n_leaves










def test_program_texts():
    texts = explorer.program_texts(_user_fn, jnp.ones((2, 2)), jnp.ones((2, 2)))
    assert "tanh" in texts["jaxpr"] and "stablehlo.tanh" in texts["stablehlo"]
    assert texts["hlo"] is None or "tanh" in texts["hlo"]
    np.testing.assert_equal(len(texts), 3)


# -- cold compiles under a persistent compilation cache ------------------------------------------
COLD_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import jax
    cache = sys.argv[1]
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    import jax.numpy as jnp
    import explorer

    hits = []
    jax.monitoring.register_event_listener(
        lambda event, **kw: hits.append(1) if event == "/jax/compilation_cache/cache_hits" else None)

    def f(x):
        return jnp.sin(x) @ x.T + 1.0

    x = jnp.ones((32, 32))
    # Control: without explorer, the second cold compile of f is served by the cache.
    jax.jit(f).lower(x).compile()
    jax.clear_caches()
    jax.jit(f).lower(x).compile()
    control = len(hits)
    found = [explorer.measure(f, x, repeats=2) for _ in range(3)]
    after = len(hits)
    jax.clear_caches()
    jax.jit(f).lower(x).compile()  # the user's cache works again afterwards
    print(json.dumps({
        "control_hits": control,
        "measures": [[m.cache_hits, m.backend_compiles, m.cold] for m in found],
        "hits_during_measures": after - control,
        "hits_after": len(hits) - after,
        "cache_flag_after": jax.config.jax_enable_compilation_cache,
        "cache_files": len(os.listdir(cache)),
    }))
""")


@pytest.mark.slow
def test_measure_is_cold_even_with_a_persistent_cache_configured(tmp_path):
    cache = tmp_path / "jax-cache"
    cache.mkdir()
    done = subprocess.run([sys.executable, "-c", COLD_SCRIPT, str(cache)], capture_output=True,
                          text=True, timeout=180, env={**os.environ, **CPU_ENV}, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["control_hits"] >= 1, "the cache was not active: this test would prove nothing"
    assert result["cache_files"] >= 1
    for cache_hits, backend_compiles, cold in result["measures"]:
        assert cache_hits == 0
        assert backend_compiles >= 2  # one real XLA compile per repeat
        assert cold is True
    assert result["hits_during_measures"] == 0
    assert result["cache_flag_after"] is True
    assert result["hits_after"] >= 1


def test_program_texts_reports_each_stage_as_it_starts():
    import jax.numpy as jnp  # noqa: PLC0415

    stages = []
    texts = explorer.program_texts(lambda x: jnp.sin(x) * 2, jnp.ones(3), on_stage=stages.append)
    assert stages == ["trace", "lower", "compile", "print"]
    assert "sin" in texts["jaxpr"]
