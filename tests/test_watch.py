"""``explorer.watch``: every compilation of a program, ranked, with its cause and its place.

Small programs: each test compiles a handful of tiny functions. The counts are checked against
what ``jax_log_compiles`` logs for the same run; the places against this file's own lines.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import re
import subprocess
import sys
import textwrap
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _support import CPU_ENV, ROOT

import explorer
from explorer._src import compat
from explorer.testing import WATCH_FIELDS as FIELDS
from explorer.testing import explain_cache_miss as explain
from explorer.testing import is_user_file
from explorer.testing import load_watched

HERE = os.path.abspath(__file__)


def _line_here(marker: str) -> int:
    """The line of this file that ends with the comment ``# <marker>``."""
    with open(HERE, encoding="utf-8") as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}"))


def _line_of(fn) -> str:
    fn = getattr(fn, "__wrapped__", fn)
    return f"{HERE}:{fn.__code__.co_firstlineno}"


class _LoggedCompiles(logging.Handler):
    """What ``jax_log_compiles`` says: one "Finished XLA compilation" line per compile."""

    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        if record.getMessage().startswith("Finished XLA compilation"):
            self.lines.append(record.getMessage())


@contextlib.contextmanager
def logged_compiles():
    """The lines ``jax_log_compiles`` logs while the block runs."""
    handler = _LoggedCompiles()
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    jax.config.update("jax_log_compiles", True)
    try:
        yield handler.lines
    finally:
        jax.config.update("jax_log_compiles", False)
        logger.removeHandler(handler)


def _fresh_loss():
    """A new function object each call: JAX's caches have never seen it, so it compiles."""
    def _loss(params, x):
        return jnp.sum((params["w"] * x + params["b"]) ** 2)
    return _loss


def _per_name_step(state, params):
    """jax-ml/jax#4667's per-name decay step: the same two operations once per name."""
    return {k: 0.999 * state[k] + 1e-3 * params[k] for k in state}


def _named(n, value=1.0):
    return {f"x{i}": jnp.float32(value * i) for i in range(n)}


# -- the records ---------------------------------------------------------------------------
def test_a_record_has_the_contract_fields_with_true_values():
    params = {"w": jnp.ones(3), "b": jnp.zeros(3)}
    x = jnp.arange(3.0)
    _loss = _fresh_loss()
    loss = jax.jit(_loss)
    with explorer.watch(findings=False) as w:
        value = loss(params, x)
    (rec,) = [r for r in w.compiles if r.name == "_loss"]
    assert {f: type(getattr(rec, f)).__name__ for f in FIELDS} == {
        "name": "str", "where": "str", "trace_s": "float", "lower_s": "float",
        "compile_s": "float", "n_leaves": "int", "hlo_pre_bytes": "int", "eqns": "int",
        "cache_hit": "bool", "reason": "NoneType"}
    assert rec.where == _line_of(_loss)
    assert rec.n_leaves == 3
    assert rec.eqns == explorer.count_eqns(jax.make_jaxpr(_loss)(params, x))
    assert rec.hlo_pre_bytes == len(jax.jit(_loss).lower(params, x).as_text())
    assert rec.trace_s > 0 and rec.lower_s > 0 and rec.compile_s > 0
    assert not rec.cache_hit
    assert float(value) == float(_loss(params, x))  # the program computed what it would have
    frame = w.to_frame()
    assert list(frame.columns) == list(FIELDS) and len(frame) == len(w.compiles)
    assert frame["reason"].isna().all()


def test_recompile_reasons_say_what_changed():
    @jax.jit
    def shaped(x):
        return x * 2

    @functools.partial(jax.jit, static_argnums=1)
    def static(x, n):
        return x * n

    @jax.jit
    def tree(p):
        return p["w"] * 2

    with explorer.watch(findings=False) as w:
        shaped(jnp.ones(3))
        shaped(jnp.ones(4))
        shaped(jnp.ones(3, jnp.int32))
        static(jnp.ones(2), 2)
        static(jnp.ones(2), 3)
        for _ in range(2):
            jax.jit(lambda v: v + 1)(jnp.ones(2))
        tree({"w": jnp.ones(2)})
        tree({"w": jnp.ones(2), "b": jnp.ones(2)})
        tree({"w": jnp.ones(3), "c": jnp.ones(2)})
        with jax.default_matmul_precision("highest"):
            shaped(jnp.ones(3))
    by = {}
    for r in w.compiles:
        by.setdefault(r.name, []).append(r)
    assert by["shaped"][0].reason is None
    assert by["shaped"][1].reason == "shape changed: x is f32[4], was f32[3]"
    assert by["shaped"][2].reason == "dtype changed: x is i32[3], was f32[3]"
    assert by["static"][1].reason == "static argument changed: n is 3, was 2"
    assert by["<lambda>"][0].reason is None
    assert by["<lambda>"][1].reason.startswith("new function object each call")
    assert len({r.where for r in by["<lambda>"]}) == 1
    assert by["tree"][1].reason == "argument structure changed: p['b'] is new"
    # a new leaf and another's shape changed: both said (the shape change went unsaid)
    assert by["tree"][2].reason == ("argument structure changed: p['c'] is new; "
                                    "shape changed: p['w'] is f32[3], was f32[2]")
    assert by["shaped"][3].reason.startswith("compiled again with the same arguments: JAX's "
                                             "tracing context changed")


def test_a_weakly_typed_argument_that_becomes_typed_is_named_with_what_to_write():
    """A parameter made from a Python number (``jnp.array(0.01)``) is weakly typed; its first
    update makes it a float32 array and the step compiles again. Both directions are a weak
    type change, said with where the weak type comes from and what to write, not a "shape
    change" of f32[] into f32[]."""
    @jax.jit
    def update(w, g):
        return w - 0.1 * g

    with explorer.watch(findings=False) as w:
        drift = jnp.array(0.01)
        drift = update(drift, jnp.float32(1.0))      # typed from here on
        update(drift, jnp.float32(1.0))
        update(jnp.array(0.5), jnp.float32(1.0))     # weak again: the first trace is reused
        update(jnp.zeros(2) + 1.0, jnp.float32(1.0))
    reasons = [r.reason for r in w.compiles if r.name == "update"]
    assert reasons[:2] == [None, "weak type changed: w is f32[], was f32[]{weak_type=True} "
                                 "(weakly typed: made from a Python number; give it a dtype "
                                 "where it is made, jnp.asarray(x, jnp.float32))"], reasons
    assert reasons[2] == "shape changed: w is f32[2], was f32[]", reasons


def test_without_the_trace_jaxs_own_explanation_gives_the_reason(monkeypatch):
    """compat's public fallback for the causes: JAX's cache-miss explanations stay on."""
    monkeypatch.setattr(compat, "jit_trace_in_progress", lambda frame: None)

    @jax.jit
    def shaped(x):
        return x * 2

    with explorer.watch(findings=False) as w:
        shaped(jnp.ones(3))
        shaped(jnp.ones(4))
        assert jax.config.jax_explain_cache_misses
    assert [r.reason for r in w.compiles if r.name == "shaped"] == [
        None, "shape changed: x is f32[4], was f32[3]"]


def test_explanations_are_read_from_jaxs_words():
    e = explain("TRACING CACHE MISS at /a/b.py:3 (<module>):\n  for f defined at /a/b.py:1\n"
                "  all previously seen cache keys differ. For the closest previous key:\n"
                "  Tracing context doesn't match, e.g. due to config or context manager.\n"
                "  * jax_default_matmul_precision differs: now highest and before None")
    assert (e.name, e.definition) == ("f", "/a/b.py:1")
    assert e.reason == ("tracing context (a config option or context manager) changed: "
                        "jax_default_matmul_precision is highest, was None")
    odd = explain("TRACING CACHE MISS at x.py:1:\n  for g defined at x.py:2\n  something new\n")
    assert odd.reason == "something new" and "\n" not in odd.reason


def test_counts_match_jax_log_compiles():
    step = jax.jit(_per_name_step)
    with explorer.watch(findings=False) as w, logged_compiles() as logged:
        state, params = _named(4), _named(4, 0.5)
        for _ in range(3):
            state = step(state, params)
        jax.grad(lambda s: jnp.sum(jnp.stack(list(step(s, params).values()))))(state)
        jnp.ones(5).sum()
    assert len(w.compiles) == len(logged) > 4
    assert all(r.where.startswith(HERE + ":") for r in w.compiles), [r.where for r in w.compiles]


def test_every_setting_is_put_back_even_when_the_program_raises():
    compiler = logging.getLogger("jax._src.compiler")
    before = (jax.config.jax_explain_cache_misses, jax.config.values["jax_dump_ir_to"],
              jax.config.values["jax_dump_ir_modes"],
              jax.config.values["jax_include_debug_info_in_dumps"], compiler.level,
              list(compiler.filters), len(jax._src.monitoring.get_event_duration_listeners()))
    with pytest.raises(ZeroDivisionError), explorer.watch() as w:
        assert jax.config.jax_explain_cache_misses  # until the first trace is read
        jax.jit(lambda v: v - 1)(jnp.ones(2))
        assert not jax.config.jax_explain_cache_misses
        dump = jax.config.values["jax_dump_ir_to"]
        1 / 0  # noqa: B018
    after = (jax.config.jax_explain_cache_misses, jax.config.values["jax_dump_ir_to"],
             jax.config.values["jax_dump_ir_modes"],
             jax.config.values["jax_include_debug_info_in_dumps"], compiler.level,
             list(compiler.filters), len(jax._src.monitoring.get_event_duration_listeners()))
    assert after == before
    assert not os.path.exists(dump)
    assert w.compiles and w.wall_s is not None


def test_the_users_log_is_untouched(caplog):
    caplog.set_level(logging.DEBUG)
    with explorer.watch(findings=False):
        jax.jit(lambda v: v * 3)(jnp.ones(2))
        jax.jit(lambda v: v * 3)(jnp.ones(2))
    assert not [r for r in caplog.records if "CACHE MISS" in r.getMessage()
                or r.getMessage().startswith("Dumped the module")]
    caplog.clear()
    jax.config.update("jax_explain_cache_misses", True)  # the user asked: they see it
    try:
        with explorer.watch(findings=False) as w:
            jax.jit(lambda v: v * 4)(jnp.ones(2))
    finally:
        jax.config.update("jax_explain_cache_misses", False)
    assert [r for r in caplog.records if r.getMessage().startswith("TRACING CACHE MISS")]
    assert w.compiles


def test_a_users_own_ir_dump_is_read_and_left_alone(tmp_path):
    third = lambda v: v / 3  # noqa: E731
    jax.config.update("jax_dump_ir_to", str(tmp_path))
    try:
        with explorer.watch(findings=False) as w:
            jax.jit(third)(jnp.ones(2))
            assert jax.config.values["jax_dump_ir_to"] == str(tmp_path)
        assert jax.config.values["jax_dump_ir_to"] == str(tmp_path)
    finally:
        jax.config.update("jax_dump_ir_to", "")
    assert w.compiles and any(tmp_path.glob("*.mlir"))  # their files stay
    # Their dumps carry debug info (JAX's default), so their length is not as_text()'s; the
    # size comes from the module itself.
    (rec,) = [r for r in w.compiles if r.name == "<lambda>"]
    assert rec.hlo_pre_bytes == len(jax.jit(third).lower(jnp.ones(2)).as_text())


def test_a_persistent_cache_hit_is_marked(tmp_path):
    saved = {k: jax.config.values[k] for k in (
        "jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes")}
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)

    def cached(v):
        return jnp.cos(v) * 7

    try:
        jax.jit(cached)(jnp.ones(3))  # written to the cache
        jax.clear_caches()
        with explorer.watch(findings=False) as w:
            jax.jit(cached)(jnp.ones(3))
    finally:
        for k, value in saved.items():
            jax.config.update(k, value)
    (rec,) = [r for r in w.compiles if r.name == "cached"]
    assert rec.cache_hit


# -- the ranking and its report ------------------------------------------------------------
def test_summary_ranks_by_compile_seconds_and_gives_the_share_of_wall_time():
    big = jax.jit(_per_name_step)
    small = jax.jit(lambda v: v + 1)
    with explorer.watch(findings=False) as w:
        big(_named(60), _named(60))
        small(jnp.ones(2))
        small(jnp.ones(3))
    table = w.summary()
    assert {"name", "where", "compiles", "compile_s"} <= set(table.columns)
    assert list(table["compile_s"]) == sorted(table["compile_s"], reverse=True)
    assert table["compiles"].sum() == len(w.compiles)
    row = table.set_index("name").loc["<lambda>"]
    assert row["compiles"] == 2 and row["reason"].startswith("shape changed")
    assert 0 < table.attrs["share_of_wall"] <= 1.5
    assert table.attrs["wall_s"] == w.wall_s
    text = str(w)
    assert "of the program's" in text and "wall time" in text and "_per_name_step" in text


def test_a_program_that_never_compiles_says_so():
    f = jax.jit(lambda v: v * 5)
    x = jnp.ones(2)
    f(x)
    with explorer.watch() as w:
        f(x)
    assert w.compiles == () and w.summary().empty
    assert "no compilations" in str(w)
    assert "no compilations" in w._repr_html_()


def test_nested_watches_both_record_and_say_so():
    with explorer.watch(findings=False) as outer:
        jax.jit(lambda v: v * 6)(jnp.ones(2))
        with explorer.watch(findings=False) as inner:
            jax.jit(lambda v: v * 7)(jnp.ones(2))
        jax.jit(lambda v: v * 8)(jnp.ones(2))
    assert len(inner.compiles) >= 1 and len(outer.compiles) > len(inner.compiles)
    # the outer one still listened after the inner one closed
    assert sum(r.name == "<lambda>" for r in outer.compiles) == 3
    assert any(n.startswith("this watch ran inside") for n in inner.notes)
    assert any("inside this one" in n for n in outer.notes)
    assert not jax.config.jax_explain_cache_misses
    with pytest.raises(RuntimeError, match="already used"), outer:
        pass


def test_threads_compiling_at_once_are_each_recorded():
    barrier = threading.Barrier(3)
    errors = []

    def work(k):
        try:
            barrier.wait()
            fn = jax.jit(lambda v: jnp.sin(v) * k)
            for n in range(2, 5):
                fn(jnp.ones(n))
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    with explorer.watch(findings=False) as w, logged_compiles() as logged:
        threads = [threading.Thread(target=work, args=(k,), name=f"t{k}") for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    assert len(w.compiles) == len(logged)
    per_thread = {}
    for r in w.compiles:
        per_thread.setdefault(r.thread, []).append(r)
    assert {"t0", "t1", "t2"} <= set(per_thread)
    for name in ("t0", "t1", "t2"):
        lambdas = [r for r in per_thread[name] if r.name == "<lambda>"]
        assert len(lambdas) == 3 and lambdas[0].trace_s is not None
    assert any("threads compiled" in n for n in w.notes)


def test_findings_diagnose_the_top_function_on_its_own_call():
    step = jax.jit(_per_name_step)
    with explorer.watch() as w:
        step(_named(40), _named(40))
        jax.jit(lambda v: v + 1)(jnp.ones(2))
    top = w.findings[0]
    assert top.name == "_per_name_step" and top.where == _line_of(_per_name_step)
    assert top.diagnosis is not None and top.diagnosis.n_leaves == 80
    assert "per-leaf-repetition" in top.diagnosis.kinds
    assert w._calls == {}  # the arguments are let go once the findings are made
    assert "per-leaf-repetition" in str(w)
    with explorer.watch(findings=False) as off:
        step(_named(41), _named(41))
    assert off.findings == [] and off._calls == {}


def test_findings_are_not_made_inside_the_block():
    with explorer.watch() as w:
        with pytest.raises(RuntimeError, match="after the watch closes"):
            w.findings  # noqa: B018


def test_the_page_is_offline_escaped_and_never_replaces_a_foreign_file(tmp_path):
    @jax.jit
    def tag_fn(v):  # a name with characters HTML must escape comes from the program
        return v * 9

    with explorer.watch() as w:
        tag_fn(jnp.ones(2))
        tag_fn(jnp.ones(3))
    page = w.to_html(tmp_path / "c.html")
    html = page.read_text()
    assert "<svg" in html and "tag_fn" in html and "shape changed" in html
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", html)
    assert "<script" not in html
    w.to_html(page)  # our own page is replaced
    foreign = tmp_path / "notes.html"
    foreign.write_text("<p>mine</p>")
    with pytest.raises(ValueError, match="not an explorer.watch page"):
        w.to_html(foreign)
    assert foreign.read_text() == "<p>mine</p>"


@pytest.mark.browser
def test_the_page_shows_offline_in_chromium(tmp_path, page):
    with explorer.watch() as w:
        jax.jit(_per_name_step)(_named(30), _named(30))
    path = w.to_html(tmp_path / "compiles.html")
    asked = []
    page.route("**/*", lambda route: (asked.append(route.request.url), route.abort())
               if not route.request.url.startswith("file:") else route.continue_())
    page.goto(path.as_uri())
    assert page.locator("svg rect").count() >= 2
    assert page.locator("table").first.is_visible()
    assert page.get_by_text("per-leaf-repetition").first.is_visible()
    assert asked == []


# -- real libraries --------------------------------------------------------------------------
@pytest.mark.slow
def test_an_optax_training_step():
    optax = pytest.importorskip("optax")
    opt = optax.adam(1e-2)
    params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}

    def loss(p, x):
        return jnp.mean((x @ p["w"] + p["b"]) ** 2)

    @jax.jit
    def train_step(p, state, x):
        g = jax.grad(loss)(p, x)
        updates, state = opt.update(g, state, p)
        return optax.apply_updates(p, updates), state

    with explorer.watch(findings=False) as w, logged_compiles() as logged:
        state = opt.init(params)
        for _ in range(3):
            params, state = train_step(params, state, jnp.ones((4, 3)))
    assert len(w.compiles) == len(logged), (w.notes, logged)
    (rec,) = [r for r in w.compiles if r.name == "train_step"]
    assert rec.where == _line_of(train_step)
    assert all(r.where.startswith(HERE + ":") for r in w.compiles), [r.where for r in w.compiles]


@pytest.mark.slow
def test_a_diffrax_solve():
    diffrax = pytest.importorskip("diffrax")

    def vector_field(t, y, args):
        return -args * y

    def solve(y0):
        term = diffrax.ODETerm(vector_field)
        return diffrax.diffeqsolve(term, diffrax.Tsit5(), t0=0.0, t1=1.0, dt0=0.1, y0=y0,
                                   args=0.5).ys

    with explorer.watch(findings=False) as w, logged_compiles() as logged:
        ys = solve(jnp.ones(3))
    assert np.allclose(ys[-1], np.exp(-0.5), rtol=1e-4)
    assert len(w.compiles) == len(logged) > 0
    assert all(r.where.startswith(HERE + ":") for r in w.compiles), [r.where for r in w.compiles]
    (solver,) = [r for r in w.compiles if r.name == "diffeqsolve"]
    assert solver.eqns > 100


@pytest.mark.slow
def test_an_equinox_filter_jit_step_is_charged_to_its_definition():
    eqx = pytest.importorskip("equinox")
    mlp = eqx.nn.MLP(2, 2, 4, 1, key=jax.random.PRNGKey(0))

    @eqx.filter_jit
    def forward(model, x):
        return model(x)

    with explorer.watch(findings=False) as w:
        forward(mlp, jnp.ones(2))
    (rec,) = [r for r in w.compiles if r.name == "forward"]
    assert rec.where == _line_of(forward)


def _filter_jit_step(eqx):
    names = [f"w{i}" for i in range(60)]

    @eqx.filter_jit
    def step(p):
        return sum(jnp.sum(p[k] ** 2) for k in names)  # per-name sum

    return step, {k: jnp.ones(2) for k in names}


def test_a_filter_jit_step_over_the_top_is_diagnosed_on_the_users_lines():
    """The watch holds the jax.jit call equinox makes of an eqx.filter_jit step (a wrapper and
    arguments of equinox's own) and diagnoses it as JAX traced it: the findings name the user's
    own line. They had left the program's slowest function out, then only said what to run."""
    eqx = pytest.importorskip("equinox")
    step, p = _filter_jit_step(eqx)
    with explorer.watch(top=0.2) as w:
        step(p)
    (f,) = [f for f in w.findings if f.name == "step"]
    assert f.where == _line_of(step)
    assert f.diagnosis is not None, f.note
    (found,) = [x for x in f.diagnosis.findings if x.kind == "per-leaf-repetition"]
    lines = inspect.getsource(step.__wrapped__).splitlines()
    at = next(i for i, text in enumerate(lines) if "per-name sum" in text)
    assert found.where == f"{HERE}:{step.__wrapped__.__code__.co_firstlineno + at}"
    assert "60 times" in found.message
    assert "findings for step (" in str(w)
    assert "[per-leaf-repetition]" in str(w)


@pytest.mark.slow
def test_a_watched_functions_leaves_are_named_by_the_users_parameters():
    """The jax.jit call equinox makes takes equinox's own arguments: its leaves were counted
    as 'args[1]: 201', which read as the user's second argument (here one array). They are
    named as the user passed them: the parameter, and the path into it; a plain jax.jit
    function's too, as the watch's reasons name them."""
    eqx = pytest.importorskip("equinox")
    names = [f"w{i}" for i in range(200)]

    @eqx.filter_jit
    def fit(params, xs, scale=2.0):
        return sum(jnp.sum(params[k] * xs) for k in names) * scale

    @jax.jit
    def plain(xs, params, a, b):  # the user's own jax.jit: named by its parameters too
        return sum(jnp.sum(params[k] - xs) for k in names) + a - b

    params = {k: jnp.ones(2) for k in names}
    with explorer.watch(top=0.2) as w:
        fit(params, jnp.ones(2))
        plain(jnp.ones(2), params, 1, 1)  # two leaves that are one Python object
    (g,) = [f for f in w.findings if f.name == "plain"]
    (many,) = [x for x in g.diagnosis.findings if x.kind == "many-arguments"]
    assert "(params: 200, xs: 1, a: 1; threshold" in many.message, many.message
    assert g.diagnosis.leaf_paths[-2:] == ("a", "b")
    (f,) = [f for f in w.findings if f.name == "fit"]
    d = f.diagnosis
    assert d is not None, f.note
    assert sorted(d.leaf_paths) == sorted([f"params['{k}']" for k in names] + ["xs"])
    (many,) = [x for x in d.findings if x.kind == "many-arguments"]
    assert "(params: 200, xs: 1; threshold" in many.message, many.message
    assert "(params: 200, xs: 1;" in str(w)
    direct = explorer.diagnose(fit, params, jnp.ones(2))  # called by the user: args[i] as given
    (many,) = [x for x in direct.findings if x.kind == "many-arguments"]
    assert "(args[0]: 200, args[1]: 1; threshold" in many.message, many.message


def test_a_filter_jit_step_whose_call_is_not_found_says_what_to_run_instead(monkeypatch):
    """Where the watch cannot find the call equinox made (JAX moved its trace), the step is
    still named, with what to run instead; and what that advises works."""
    eqx = pytest.importorskip("equinox")
    monkeypatch.setattr(compat, "jit_trace_in_progress", lambda frame: None)
    step, p = _filter_jit_step(eqx)
    with explorer.watch(top=0.2) as w:
        step(p)
    (f,) = [f for f in w.findings if f.name == "step"]
    assert f.diagnosis is None and f.where == _line_of(step)
    assert "explorer.diagnose(step, *args)" in f.note
    assert f.note in str(w)
    monkeypatch.undo()
    d = explorer.diagnose(step, p)  # the jitted function as the user wrote it
    assert [x.kind for x in d.findings] == ["per-leaf-repetition"], d


def test_an_eager_operation_on_a_users_line_is_not_called_library_jitted():
    """An operation run outside jit on the user's line (``sum`` of arrays: ``add``) is named by
    that line; it is not the user's function, and not said to be jitted by a library."""
    xs = [jnp.full((5, 11), float(i)) for i in range(4)]  # a shape of its own: compiled here
    with explorer.watch(top=0.0) as w:
        total = sum(xs)  # eager adds
    assert float(total[0, 0]) == 6.0
    named = [f for f in w.findings if f.where.endswith(f":{_line_here('eager adds')}")]
    assert named, [(f.name, f.where) for f in w.findings]
    for f in named:
        assert not f.users and "library's jit" not in (f.note or ""), f


def test_an_equinox_filter_jit_recompile_names_the_users_argument():
    """JAX explains equinox's own arguments (``dynamic_nodonate['rest'][0]``); the reason
    names the user's parameter, and the path into it."""
    eqx = pytest.importorskip("equinox")

    class Affine(eqx.Module):
        w: jax.Array

    @eqx.filter_jit
    def scaled(x, scale=2.0):
        return x * scale

    @eqx.filter_jit
    def apply(model, x):
        return model.w.sum() * x

    with explorer.watch(findings=False) as w:
        scaled(jnp.ones(3))
        scaled(jnp.ones(4))
        scaled(jnp.ones(4), scale=3.0)
        apply(Affine(jnp.ones(2)), jnp.ones(2))
        apply(Affine(jnp.ones(3)), jnp.ones(2))
    by = {}
    for r in w.compiles:
        by.setdefault(r.name, []).append(r)
    assert [r.reason for r in by["scaled"]] == [
        None, "shape changed: x is f32[4], was f32[3]",
        "static argument changed: scale is 3.0, was 2.0"]
    assert [r.reason for r in by["apply"]] == [None, "shape changed: model.w is f32[3], was f32[2]"]
    assert {r.where for r in by["scaled"]} == {_line_of(scaled)}
    assert not any("dynamic_nodonate" in (r.reason or "") for r in w.compiles)


# -- the private route, and what it waits on ------------------------------------------------
def test_compat_reads_the_trace_and_the_lowering():
    """Fails when JAX moves what ``compat.jit_trace_in_progress`` and
    ``compat.lowering_in_progress`` read (the watch would lose equations and findings)."""
    seen = {}

    def listener(event, duration, **kw):
        if event == "/jax/core/compile/jaxpr_trace_duration" and kw.get("fun_name") == "_loss":
            seen["trace"] = compat.jit_trace_in_progress(sys._getframe(1))
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration" and "_loss" in str(
                kw.get("fun_name")):
            seen["lower"] = compat.lowering_in_progress(sys._getframe(1))

    _loss = _fresh_loss()
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        params, x = {"w": jnp.ones(3), "b": jnp.zeros(3)}, jnp.ones(3)
        jax.jit(_loss)(params, x)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    trace, lower = seen["trace"], seen["lower"]
    assert trace is not None and trace.fun is _loss and trace.args[1] is x
    assert explorer.count_eqns(trace.jaxpr) == explorer.count_eqns(
        jax.make_jaxpr(_loss)(params, x))
    assert lower is not None and lower[1] == 3 and lower[2] == _line_of(_loss)


def test_compat_reads_the_module_being_compiled():
    """Fails when JAX moves what ``compat.module_being_compiled`` reads (the watch would
    go back to dumping every module, inside XLA's timed stage)."""
    seen = []

    def listener(event, duration, **kw):
        if event == "/jax/core/compile/backend_compile_duration" and "_loss" in str(
                kw.get("fun_name")):
            seen.append(compat.module_being_compiled(sys._getframe(1)))

    _loss = _fresh_loss()
    params, x = {"w": jnp.ones(3), "b": jnp.zeros(3)}, jnp.ones(3)
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        jax.jit(_loss)(params, x)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    (module,) = seen
    assert module.operation.get_asm(enable_debug_info=False) == jax.jit(_loss).lower(
        params, x).as_text()


def test_the_watch_stops_dumping_once_it_reads_the_modules():
    with explorer.watch(findings=False) as w:
        jax.jit(lambda v: v * 5)(jnp.ones(2))
        assert jax.config.values["jax_dump_ir_to"] == ""  # put back after the first compile
        cube = jax.jit(lambda v: v ** 3)
        cube(jnp.ones(2))
    assert w.compiles[-1].hlo_pre_bytes == len(cube.lower(jnp.ones(2)).as_text())


def test_without_the_private_route_the_watch_still_counts_and_places(monkeypatch):
    """compat's public fallback (JAX moved what it reads): no equations, no findings, argument
    leaves counted from the StableHLO signature, every compile still listed and placed."""
    monkeypatch.setattr(compat, "jit_trace_in_progress", lambda frame: None)
    monkeypatch.setattr(compat, "lowering_in_progress", lambda frame: None)
    monkeypatch.setattr(compat, "module_being_compiled", lambda frame: None)
    params, x = {"w": jnp.ones(3), "b": jnp.zeros(3)}, jnp.ones(3)
    _loss = _fresh_loss()
    with explorer.watch() as w, logged_compiles() as logged:
        jax.jit(_loss)(params, x)
    assert len(w.compiles) == len(logged)
    (rec,) = [r for r in w.compiles if r.name == "_loss"]
    assert rec.where == _line_of(_loss) and rec.eqns is None and rec.n_leaves == 3
    assert rec.hlo_pre_bytes == len(jax.jit(_loss).lower(params, x).as_text())
    assert all(f.diagnosis is None for f in w.findings)


def test_user_files_are_told_from_libraries():
    assert is_user_file(HERE) and is_user_file("<stdin>")
    assert not is_user_file(jax.__file__) and not is_user_file(explorer.__file__)
    assert not is_user_file(np.__file__) and not is_user_file(threading.__file__)


# -- the command line ----------------------------------------------------------------------
_SCRIPT = textwrap.dedent("""\
    import sys
    import jax, jax.numpy as jnp

    @jax.jit
    def grow(x):
        return x * 2

    print("argv", sys.argv)
    for n in range(1, 4):
        grow(jnp.ones(n))
    if "--boom" in sys.argv:
        raise RuntimeError("boom at the end")
    if "--exit" in sys.argv:
        sys.exit(int(sys.argv[-1]))
    """)


def _run(args, cwd):
    env = {**os.environ, **CPU_ENV, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.slow
def test_cli_runs_a_script_as_python_would(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(_SCRIPT)
    ok = _run(["-m", "explorer.watch", "prog.py", "a", "--b"], tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == f"argv [{str(script)!r}, 'a', '--b']"
    assert "3 compilations" not in ok.stdout and "grow (prog.py:4)" in ok.stderr
    assert re.search(r"shape changed: x is f32\[3\], was f32\[[12]\] \(×2\)", ok.stderr)

    boom = _run(["-m", "explorer", "watch", "--no-findings", "prog.py", "--boom"],
                tmp_path)
    plain = _run(["prog.py", "--boom"], tmp_path)
    assert boom.returncode == plain.returncode == 1
    traceback = plain.stderr.strip().splitlines()
    assert boom.stderr.splitlines()[:len(traceback)] == traceback  # as Python prints it
    assert "grow (prog.py:4)" in boom.stderr.split("RuntimeError: boom at the end", 1)[1]

    code = _run(["-m", "explorer.watch", "--html", "out.html", "prog.py", "--exit", "3"],
                tmp_path)
    assert code.returncode == 3 and (tmp_path / "out.html").exists()

    missing = _run(["-m", "explorer.watch", "nope.py"], tmp_path)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "no such script" in missing.stderr
    bad = _run(["-m", "explorer.watch", "--html", str(tmp_path / "no" / "x.html"), "prog.py"],
               tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and bad.stdout == ""


_SLOW_COMPILE = """
import atexit, pathlib, sys, time
import jax, jax.numpy as jnp
atexit.register(lambda: pathlib.Path(sys.argv[1]).write_text("the script's atexit ran"))

@jax.jit
def small(x):
    return x + 1

@jax.jit
def per_name(d):  # seconds of XLA compile: interrupted there
    return sum(jnp.sin(v) * jnp.cos(v) + v ** 3 for v in d.values())

small(1.0)
lowered = per_name.lower({f"x{i}": jnp.float32(i) for i in range(3000)})
print("compiling", flush=True)
lowered.compile()
time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.parametrize("command", [["-m", "explorer.watch"], ["-m", "explorer", "watch"]])
def test_ctrl_c_during_a_compile_ends_as_python_does(tmp_path, command):
    """Ctrl-C while XLA compiles, under a watch: the ranking of what compiled, the script's
    atexit handlers, then killed by SIGINT as ``python script.py`` is (a jax.monitoring
    listener made the interpreter's teardown crash: exit status -11)."""
    import signal
    import time

    (tmp_path / "prog.py").write_text(_SLOW_COMPILE)
    marker = tmp_path / "atexit.txt"
    proc = subprocess.Popen([sys.executable, *command, "--no-findings", "prog.py", str(marker)],
                            cwd=tmp_path, env={**os.environ, **CPU_ENV, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "compiling"
        time.sleep(1.0)  # inside per_name's XLA compile (seconds long)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGINT, (proc.returncode, err[-2000:])
    assert "KeyboardInterrupt" in err and "small (prog.py:" in err
    assert marker.read_text() == "the script's atexit ran"


# Ctrl-C that Python's handler raises inside a garbage-collector callback (JAX registers one;
# where a watched script's Ctrl-C landed while it traced, and the script went on to a 215 s
# compile): Python prints it and drops it.
_CTRL_C_IN_GC = """
import gc, os, signal, sys, threading, time
import jax, jax.numpy as jnp

fired = []

def in_gc(phase, info):
    if (phase == "start" and not fired
            and threading.current_thread() is threading.main_thread()):
        fired.append(True)
        print("interrupting inside a gc callback", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # Python's handler runs here, inside this callback

jax.jit(lambda x: x + 1)(1.0)
gc.callbacks.append(in_gc)
gc.collect()
for _ in range(300):
    time.sleep(0.1)
print("ran to the end", flush=True)
"""


@pytest.mark.slow
def test_ctrl_c_taken_inside_a_gc_callback_still_stops_the_watched_script(tmp_path):
    import signal

    (tmp_path / "prog.py").write_text(_CTRL_C_IN_GC)
    done = subprocess.run(
        [sys.executable, "-m", "explorer", "watch", "--no-findings", "prog.py"],
        cwd=tmp_path, env={**os.environ, **CPU_ENV, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=120)
    assert "interrupting inside a gc callback" in done.stderr  # what this test is about
    assert "ran to the end" not in done.stdout
    assert done.returncode == -signal.SIGINT, (done.returncode, done.stderr[-2000:])
    assert "KeyboardInterrupt" in done.stderr and "<lambda> (prog.py:" in done.stderr


def test_cli_in_process_stores_the_run(tmp_path, capsys, monkeypatch):
    from explorer.watch import main

    script = tmp_path / "prog.py"
    script.write_text(_SCRIPT)
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "results.sqlite"
    assert main(["--store", str(store), "--top", "1", str(script), "x"]) == 0
    out = capsys.readouterr()
    assert f"argv [{str(script)!r}, 'x']" in out.out and "stored" in out.err
    runs, compiles, findings = load_watched(str(store))
    assert len(runs) == 1 and runs["status"][0] == 0
    assert len(compiles) == runs["n_compiles"][0] and "grow" in set(compiles["name"])
    assert len(findings) >= 1
    assert main(["--store", str(tmp_path), str(script)]) == 2
    assert "is a directory" in capsys.readouterr().err


@pytest.mark.slow
def test_import_explorer_watch_keeps_the_function(tmp_path):
    code = ("import explorer, explorer.watch, jax, jax.numpy as jnp\n"
            "from explorer import watch\n"
            "with explorer.watch(findings=False) as w:\n"
            "    jax.jit(lambda v: v + 1)(jnp.ones(2))\n"
            "with watch(findings=False) as w2:\n"
            "    pass\n"
            "print(len(w.compiles) > 0, w2.compiles == (), callable(explorer.watch))\n")
    done = _run(["-c", code], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"]


def test_the_watch_page_is_written_with_the_umasks_mode(tmp_path):
    """mkstemp makes a file 0600: the page must be an ordinary file, as open() would make it."""
    import os  # noqa: PLC0415

    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415

    import explorer  # noqa: PLC0415

    def fresh(x):
        return x * 3.0 + 1.0

    with explorer.watch(findings=False) as w:
        jax.jit(fresh)(jnp.arange(3.0))
    old = os.umask(0o022)
    try:
        page = w.to_html(tmp_path / "compiles.html")
    finally:
        os.umask(old)
    assert page.stat().st_mode & 0o777 == 0o644


def test_the_jax_loggers_the_watch_listens_to_are_jaxs_modules():
    """compat.JAX_LOGGERS are named after JAX modules: fails when JAX moves one (the watch would
    then hear no cache-miss reason from it)."""
    import importlib  # noqa: PLC0415

    from explorer._src import compat  # noqa: PLC0415

    for name in compat.JAX_LOGGERS:
        assert importlib.import_module(name).__name__ == name
