"""State and logic of the dashboard: a ``param.Parameterized`` that imports no Panel.

Everything a page does (run, sweep, cancel, inspect, compare) is a method here, so it can be
driven from tests and notebooks without a browser; ``explorer/_dashboard.py`` only lays widgets
out. Per-session state lives in the instance. Measurements go through
:func:`explorer.shared_executor` (one queue for every session, one job at a time), are stored in
the :class:`explorer.Store` the moment they finish, and are waited for on a background thread,
never on the page's event loop. Updates made from that thread reach the page through
:attr:`ExplorerModel.dispatch` (the dashboard schedules them on the session's event loop).

"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import functools
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import param

from . import _plots
from . import _run
from . import _validate as v
from ._example import describe_example, load_example
from ._jobs import MAX_ROLLOUT_VARS, compare_specs, inspect_spec, rollout_spec
from ._plotcache import PLOT_CACHE, array_key, frame_key
from ._problems import problems as _problems
from ._representations import REPRESENTATIONS
from ._spec import Spec
from ._store import COLUMNS, TABLE_COLUMNS, Store, StoreError, to_frame
from ._worker import WorkerExecutor, shared_executor

N_CHOICES: tuple[int, ...] = (1, 3, 10, 30, 100, 300, 1000, 3000, 10000)
MAX_N_STATES = v.MAX_N_STATES
# Trajectories are captured (and stored) only up to this state count: enough to see the curves
# coincide, small enough to keep the store light.
ROLLOUT_MAX_N = 300
# Rows read from the store when a page opens, most recent first.
INITIAL_ROWS = 2000
# Program text longer than this is cut in the page (a dict program at N=1000 is megabytes).
MAX_TEXT_CHARS = 200_000
POLL_S = 0.25
MAX_TIMEOUT_S = 3600.0
TARGET_CHOICES = ("loss", "grad", "both")

_STATUS_WORDS = {
    "timeout": "Timed out",
    "crashed": "The worker crashed on",
    "oom": "Out of memory on",
    "cancelled": "Cancelled",
    "error": "Failed",
}

class ExplorerModel(param.Parameterized):
    """One page of the explorer: the controls, the results, and what is running.

    Args:
      store: where results are stored and read (default: :func:`explorer.default_path`).
      executor: where measurements run (default: :func:`explorer.shared_executor`, the one
        queue every session shares).
    """

    # -- what to measure ---------------------------------------------------------------
    problem = param.Selector(default="decay", objects=list(_problems()),
                             doc="The dynamical system.")
    # Numbers allow None (an emptied input box) and carry no hard bounds: ``run`` checks them
    # with the core's own validators and explains a bad value in ``alert``.
    n_states = param.Integer(default=100, softbounds=(1, MAX_N_STATES), label="State count N",
                             allow_None=True,
                             doc=f"Units per state group, 1 to {MAX_N_STATES}.")
    horizon = param.Integer(default=200, softbounds=(1, 1000), label="Horizon", allow_None=True,
                            doc="Steps of the scan.")
    representations = param.ListSelector(default=["dict", "array"], objects=list(REPRESENTATIONS),
                                         doc="How the state is held; several at once.")
    target = param.Selector(default="loss", objects=list(TARGET_CHOICES),
                            doc="Measure the loss, its gradient, or both.")
    unroll = param.Integer(default=1, softbounds=(1, 32), label="Scan unroll", allow_None=True)
    backend = param.Selector(default="cpu", objects=["cpu"],
                             doc="The devices JAX sees (asked from the worker).")
    sweep_n_states = param.ListSelector(default=[1, 3, 10, 30, 100], objects=list(N_CHOICES),
                                        label="Sweep over N")
    timeout_s = param.Number(default=300.0, softbounds=(1.0, MAX_TIMEOUT_S), allow_None=True,
                             label="Timeout per case (s)")

    # -- how to look at it -------------------------------------------------------------
    stage = param.Selector(default="total", objects=list(_plots.STAGES), label="Compile stage")
    show_target = param.Selector(default="loss", objects=["loss", "grad"], label="Plot target")
    rollout_states = param.ListSelector(default=[], objects=[], label="Rollout states")
    show_example = param.Boolean(default=False, label="Show the shipped example sweep")
    compare_a = param.Selector(default="dict", objects=list(REPRESENTATIONS), label="Compare")
    compare_b = param.Selector(default="array", objects=list(REPRESENTATIONS), label="with")

    # -- state (the view reads these) --------------------------------------------------
    results = param.DataFrame(default=None, allow_None=True, precedence=-1)
    status = param.String(default="Idle.", precedence=-1)
    alert = param.String(default="", precedence=-1)
    alert_kind = param.Selector(default="danger", objects=["danger", "warning", "info", "success"],
                                precedence=-1)
    running = param.Boolean(default=False, precedence=-1, doc="A run or sweep is in progress.")
    busy = param.Boolean(default=False, precedence=-1, doc="Any background job is in progress.")
    selected = param.Integer(default=None, allow_None=True, precedence=-1,
                             doc="Id of the result whose programs to inspect.")
    program = param.Dict(default={}, precedence=-1,
                         doc="title, jaxpr, stablehlo, hlo texts of the inspected result.")
    blame_table = param.DataFrame(default=None, allow_None=True, precedence=-1)
    comparison = param.Dict(default={}, precedence=-1, doc="verdict and diffs of a comparison.")
    example_label = param.String(default="", precedence=-1)
    rollout_note = param.String(default="", precedence=-1)
    backends_known = param.Boolean(default=False, precedence=-1)
    dispatch = param.Callable(default=None, precedence=-1, doc="""
        How a background thread hands an update to the page: called with a no-argument
        function. ``None`` runs it at once (tests, scripts).""")

    # The plots depend on these counters only. A change of what they show (new results, another
    # stage...) asks for a redraw, which is made on the next turn of the page's event loop: the
    # widget the user touched answers at once, and changes that come together draw once.
    _compile_tick = param.Integer(default=0, precedence=-1)
    _metrics_tick = param.Integer(default=0, precedence=-1)
    _rollout_tick = param.Integer(default=0, precedence=-1)

    def __init__(self, *, store: Store | str | None = None, executor: cf.Executor | None = None,
                 **params: Any):
        ExplorerModel.param.problem.objects = list(_problems())  # with define_problem's too
        super().__init__(**params)
        self.store = store if isinstance(store, Store) else Store(store)
        self._executor = executor
        self._lock = threading.Lock()
        # One event per background job, set by ``cancel``; a job that starts after a cancel
        # gets a fresh one, so an old cancel never stops new work.
        self._cancels: set[threading.Event] = set()
        self._closed = False
        self._futures: set[cf.Future] = set()
        self._threads: list[threading.Thread] = []
        self._measured = to_frame([]).assign(source=pd.Series(dtype=object))
        self._example = self._measured.iloc[:0]
        self._rollouts: dict[int, tuple[list[str], np.ndarray] | None] = {}
        self._rollout_data: dict[str, tuple[list[str], np.ndarray]] = {}
        self._rollout_n: int | None = None
        self._rollout_signature: tuple | None = None
        self._pending_rows: list[pd.DataFrame] = []
        self._rows_posted = False
        self._next_status: str | None = None
        self._refresh_since = 0
        self._results_key = frame_key(None)
        self._redraw_pending: set[str] = set()
        self.param.watch(self._view_changed, ["results", "stage", "problem", "horizon", "unroll",
                                              "show_target", "rollout_states"])
        self._load_initial()
        self._follow_latest(explicit=set(params))
        self._ask_backends()

    # -- plumbing ----------------------------------------------------------------------
    @property
    def executor(self) -> cf.Executor:
        if self._executor is None:
            self._executor = shared_executor()
        return self._executor

    def _post(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` where the page wants updates made (see :attr:`dispatch`)."""
        if self._closed:
            return
        if self.dispatch is None:
            fn()
        else:
            try:
                self.dispatch(fn)
            except Exception:  # the page is gone; nothing to update
                pass

    def _show(self, message: str, kind: str = "danger") -> None:
        self.param.update(alert=message, alert_kind=kind)

    def clear_alert(self) -> None:
        self.alert = ""

    def _start(self, target: Callable, *args: Any) -> None:
        """Run ``target(cancel_event, *args)`` on a background thread of this session."""
        cancel = threading.Event()
        self._cancels.add(cancel)

        def job() -> None:
            try:
                target(cancel, *args)
            finally:
                self._cancels.discard(cancel)

        thread = threading.Thread(target=job, daemon=True,
                                  name=f"explorer-session-{target.__name__}")
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until this session's background jobs are done (for scripts and tests)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in list(self._threads):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(left)
        return not any(t.is_alive() for t in self._threads)

    def close(self) -> None:
        """Stop this session's work (its queued and running jobs are cancelled)."""
        self._closed = True
        for event in list(self._cancels):
            event.set()
        for future in list(self._futures):
            self._cancel_future(future)

    # -- loading -----------------------------------------------------------------------
    def _load_initial(self) -> None:
        try:
            stored = self.store.rows(limit=INITIAL_ROWS)
        except StoreError as err:
            stored = to_frame([])
            self._show(f"Could not read the results store: {err}. Showing the example sweep; "
                       "new measurements cannot be saved until this is fixed.", "warning")
        if not stored.empty:
            self._refresh_since = int(stored["id"].max())
        self._measured = stored.assign(source="measured")
        try:
            self._example, example_rollouts = load_example()
            self._rollouts.update(example_rollouts)
            self.example_label = describe_example(self._example)
        except (OSError, ValueError, KeyError) as err:
            self._example = self._measured.iloc[:0]
            self.example_label = f"(The example sweep could not be read: {err})"
        with param.parameterized.discard_events(self):
            self.show_example = stored.empty and not self._example.empty
        self._publish()

    def _follow_latest(self, explicit: set[str]) -> None:
        """Open on the slice of the most recent stored measurement, so the first view has
        something in its plots (controls given explicitly are left alone)."""
        frame = self._measured[self._measured["status"] == "ok"]
        if frame.empty:
            return
        latest = frame.sort_values("id").iloc[-1]
        values = {"problem": latest["problem"], "horizon": latest["horizon"],
                  "unroll": latest["unroll"], "n_states": latest["n_states"],
                  "show_target": latest["target"]}
        update = {}
        for name, value in values.items():
            if name in explicit or value is None or pd.isna(value):
                continue
            value = value if isinstance(value, str) else int(value)
            objects = getattr(self.param[name], "objects", None)
            if objects is None or value in objects:
                update[name] = value
        if update:
            self.param.update(**update)

    def _publish(self) -> None:
        parts = [self._measured]
        if self.show_example and not self._example.empty:
            parts.insert(0, self._example)
        parts = [p for p in parts if not p.empty]
        frame = pd.concat(parts, ignore_index=True) if parts else self._measured.iloc[:0].copy()
        self.results = frame
        self._refresh_rollouts()

    @param.depends("show_example", watch=True)
    def _example_toggled(self) -> None:
        self._publish()

    def refresh(self) -> int:
        """Add rows other sessions (or the CLI) stored since the last look; return how many."""
        try:
            new = self.store.rows(since_id=self._refresh_since)
        except StoreError as err:
            self._show(f"Could not read the results store: {err}", "warning")
            return 0
        if new.empty:
            return 0
        self._refresh_since = int(new["id"].max())
        return self._add_rows(new.assign(source="measured"))

    def _add_rows(self, rows: pd.DataFrame) -> int:
        with self._lock:
            have = set(self._measured["id"].dropna().astype(int))
            rows = rows[~rows["id"].astype(int).isin(have)]
            if rows.empty:
                return 0
            measured = rows if self._measured.empty else pd.concat([self._measured, rows],
                                                                   ignore_index=True)
            self._measured = measured
        self._publish()
        return len(rows)

    # -- backends ----------------------------------------------------------------------
    def _ask_backends(self) -> None:
        try:
            future = _run.backends(self.executor)
        except RuntimeError as err:  # executor shut down
            self._show(f"Cannot list JAX backends: {err}", "warning")
            return
        future.add_done_callback(lambda f: self._post(functools.partial(self._set_backends, f)))

    def _set_backends(self, future: cf.Future) -> None:
        try:
            found = list(future.result())
        except BaseException as err:  # noqa: BLE001 - shown, never raised into the page
            self._show(f"Could not ask the worker which devices JAX sees ({err}); using cpu.",
                       "warning")
            return
        found = found or ["cpu"]
        self.param.backend.objects = found
        # Until the answer came, cpu was the only choice; now default to the accelerator.
        accelerators = [b for b in found if b != "cpu"]
        self.param.update(backend=accelerators[0] if accelerators else found[0],
                          backends_known=True)

    @param.depends("target", watch=True)
    def _follow_target(self) -> None:
        if self.target in ("loss", "grad"):
            self.show_target = self.target

    # -- run, sweep, cancel ------------------------------------------------------------
    def _specs(self, sizes: Sequence[int]) -> list[Spec] | None:
        """Validated specs for the current controls, or ``None`` with the reason in ``alert``."""
        try:
            reps = v.check_many("representation", self.representations, REPRESENTATIONS)
            sizes = v.check_ints("n_states", sizes, 1, MAX_N_STATES)
            v.check_horizon(self.horizon)
            v.check_unroll(self.unroll)
            if self.target not in TARGET_CHOICES:
                raise ValueError(f"unknown target {self.target!r}; choose loss, grad or both")
            targets = ("loss", "grad") if self.target == "both" else (self.target,)
            if self.timeout_s is None or not 0 < self.timeout_s <= MAX_TIMEOUT_S:
                raise ValueError(f"timeout must be between 0 and {MAX_TIMEOUT_S:g} s, "
                                 f"got {self.timeout_s!r}")
            if self.backend not in self.param.backend.objects:
                raise ValueError(f"unknown backend {self.backend!r}; choose one of: "
                                 f"{', '.join(self.param.backend.objects)}")
            specs = [Spec(self.problem, rep, n, self.horizon, tgt, self.unroll, self.backend,
                          rollout=n <= ROLLOUT_MAX_N).validated()
                     for n in sizes for tgt in targets for rep in reps]
        except (ValueError, TypeError) as err:
            self._show(f"Bad input: {str(err).splitlines()[0]}", "danger")
            return None
        return specs

    def run(self) -> bool:
        """Measure the chosen representations at the chosen N; ``False`` if it could not start."""
        return self._launch([self.n_states], "Run")

    def sweep(self) -> bool:
        """Measure the chosen representations at every N of :attr:`sweep_n_states`."""
        if not self.sweep_n_states:
            self._show("Bad input: choose at least one state count to sweep over.", "danger")
            return False
        return self._launch(list(self.sweep_n_states), "Sweep")

    def _launch(self, sizes: Sequence[int], kind: str) -> bool:
        if self._closed:
            return False
        if self.running:
            self._show("A run is already in progress: wait for it or press Cancel.", "warning")
            return False
        specs = self._specs(sizes)
        if specs is None:
            return False
        self.clear_alert()
        self.param.update(running=True, busy=True,
                          status=f"{kind}: {len(specs)} case(s) queued…")
        self._start(self._work, specs, kind)
        return True

    def cancel(self) -> None:
        """Stop this session's run or sweep (and any inspection it is waiting for).

        A queued job is withdrawn; a running one is killed in the worker (which is replaced).
        Other sessions' jobs are never touched; rows already measured stay stored.
        """
        if not self.busy:
            return
        for event in list(self._cancels):
            event.set()
        for future in list(self._futures):
            self._cancel_future(future)
        self.status = "Cancelling…"

    def _cancel_future(self, future: cf.Future) -> None:
        _run.cancel(self.executor, future)  # withdrawn when queued, killed only when running

    def _submit(self, fn: Callable, args: tuple, label: str) -> cf.Future:
        future = _run.submit(self.executor, fn, *args, timeout=self.timeout_s, label=label)
        self._futures.add(future)
        future.add_done_callback(self._futures.discard)
        return future

    def _waiting(self, describe: Callable[[str], str]) -> Callable[[cf.Future], None]:
        """An ``on_wait`` for :func:`explorer._run.wait`: posts the job's queue position, stage
        and elapsed time to ``status``."""
        executor = self.executor

        def on_wait(future: cf.Future) -> None:
            if isinstance(executor, WorkerExecutor):
                position = executor.queue_position(future)
                state = executor.status
                if position == 0 and state.elapsed_s is not None:
                    text = describe(f"stage {state.stage or '…'}, {state.elapsed_s:.1f} s")
                elif position:
                    text = describe(f"waiting in the shared queue, position {position}"
                                    + (f" (running now: {state.running})" if state.running else ""))
                else:
                    text = describe("finishing")
            else:
                text = describe("running")
            self._set_status(text)

        return on_wait

    def _wait(self, future: cf.Future, cancel: threading.Event,
              describe: Callable[[str], str]) -> Any:
        """Wait for ``future``, posting its progress to ``status``; ``cancel`` stops it."""
        return _run.wait(self.executor, future, cancel_event=cancel, on_wait=self._waiting(describe),
                         poll_s=POLL_S)

    def _work(self, cancel: threading.Event, specs: list[Spec], kind: str) -> None:
        run_id = uuid.uuid4().hex[:12]
        started = time.monotonic()
        failures: list[dict[str, Any]] = []
        done = 0
        try:
            for i, spec in enumerate(specs):
                if cancel.is_set():
                    break
                prefix = f"{kind} {i + 1}/{len(specs)}: {spec.label}"
                # Measured first and shown at once; the trajectories follow in a job of their own.
                row, _ = _run.run_one(dataclasses.replace(spec, rollout=False), self.executor,
                                      timeout=self.timeout_s, run_id=run_id, cancel_event=cancel,
                                      on_wait=self._waiting(lambda what, p=prefix: f"{p} — {what}"))
                self._store_row(row, None)
                self._page_caught_up(cancel)
                done += 1
                if row.get("status") != "ok":
                    failures.append(row)
                    self._post(functools.partial(self._report_failure, row))
                elif spec.rollout and not cancel.is_set():
                    self._capture(spec, int(row["id"]), cancel, prefix)
        except BaseException as err:  # noqa: BLE001 - never let a session thread die silently
            self._post(functools.partial(self._show, f"Unexpected error: {err}", "danger"))
        finally:
            elapsed = time.monotonic() - started
            cancelled = cancel.is_set()
            failed = sum(1 for row in failures if row.get("status") != "cancelled")
            ok = done - len(failures)
            text = (f"{kind} {'cancelled' if cancelled else 'finished'}: {ok} of {len(specs)} "
                    f"case(s) measured in {elapsed:.1f} s"
                    + (f", {failed} failed (see the table)" if failed else "") + ".")
            self._post(functools.partial(self._finish, text))

    def _capture(self, spec: Spec, row_id: int, cancel: threading.Event, prefix: str) -> None:
        """Fetch and store the trajectories of a measured row; a failure costs only them."""
        future = self._submit(rollout_spec, (spec,), f"rollout {spec.label}")
        try:
            rollout = self._wait(future, cancel,
                                 lambda what: f"{prefix} — measured; trajectories: {what}")
        except BaseException as err:  # noqa: BLE001 - the measurement itself is kept
            if not cancel.is_set():
                what, _ = _job_failed(f"Capturing the trajectories of {spec.label}", err)
                self._post(functools.partial(
                    self._show, f"{what} The measurement is kept.", "warning"))
            return
        if row_id > 0:
            try:
                self.store.add_rollout(row_id, rollout)
            except StoreError as err:
                self._post(functools.partial(
                    self._show, f"Trajectories shown but not stored: {err}", "warning"))
        self._rollouts[row_id] = rollout
        self._post(self._refresh_rollouts)
        self._page_caught_up(cancel)

    def _page_caught_up(self, cancel: threading.Event, timeout: float = 10.0) -> None:
        """Wait until the page has drawn what was handed to it (a new row, new trajectories).

        The next job starts only then: the drawing would otherwise share the machine's cores
        with that job's compile (and slow both: the timing, and the result reaching the page).
        The check runs after the update posted before it, and waits behind every redraw that
        update asked for.
        """
        if self.dispatch is None or self._closed:
            return
        done = threading.Event()
        self._post(lambda: self._after_redraws(done.set))
        deadline = time.monotonic() + timeout
        while not done.wait(0.05):
            if cancel.is_set() or self._closed or time.monotonic() > deadline:
                return

    def _store_row(self, row: dict[str, Any], rollout: Any) -> None:
        try:
            row["id"] = self.store.add(row, rollout)
        except StoreError as err:
            # Keep the result in this page even when it cannot be saved.
            row["id"] = -(10**9 + len(self._rollouts) + 1)
            self._post(functools.partial(self._show, f"Measured but not stored: {err}", "warning"))
        self._rollouts[int(row["id"])] = rollout
        frame = to_frame([row]).assign(source="measured")
        with self._lock:
            self._pending_rows.append(frame)
            posted, self._rows_posted = self._rows_posted, True
        if not posted:
            self._post(self._flush_rows)

    def _flush_rows(self) -> None:
        """Add every row that arrived since the last flush in one update: when the page is
        busy drawing, rows that finish meanwhile are drawn together, not one redraw each."""
        with self._lock:
            frames, self._pending_rows, self._rows_posted = self._pending_rows, [], False
        if frames:
            self._add_rows(pd.concat(frames, ignore_index=True))

    def _set_status(self, text: str) -> None:
        """Post a status line from a background thread; only the latest one is shown."""
        with self._lock:
            posted, self._next_status = self._next_status is not None, text
        if not posted:
            self._post(self._flush_status)

    def _flush_status(self) -> None:
        with self._lock:
            text, self._next_status = self._next_status, None
        if text is not None and self.busy:
            self.status = text

    def _report_failure(self, row: dict[str, Any]) -> None:
        status = row.get("status", "error")
        word = _STATUS_WORDS.get(status, "Failed")
        label = (f"{row.get('problem')}/{row.get('representation')} N={row.get('n_states')} "
                 f"H={row.get('horizon')} {row.get('target')}")
        if status == "cancelled":
            self._show(f"{word}: {label}. Measurements already taken are kept.", "info")
            return
        self._show(f"{word}: {label}. {row.get('error') or ''} The server keeps running; "
                   "measurements already taken are kept.", "danger")

    def _jobs_left(self) -> bool:
        return any(not f.done() for f in list(self._futures))

    def _finish(self, text: str) -> None:
        self.param.update(running=False, busy=self._jobs_left(), status=text)

    # -- programs: inspect and compare -------------------------------------------------
    def _row(self, row_id: int | None) -> dict[str, Any] | None:
        frame = self.results
        if row_id is None or frame is None or frame.empty:
            return None
        found = frame[frame["id"] == row_id]
        return None if found.empty else found.iloc[-1].to_dict()

    def inspect(self, row_id: int | None = None) -> bool:
        """Fetch the jaxpr, StableHLO, optimised HLO and equation blame of a result (the
        selected one by default); the work runs in the worker, like a measurement."""
        row_id = self.selected if row_id is None else row_id
        row = self._row(row_id)
        if row is None:
            self._show("Select a row of the results table first.", "warning")
            return False
        try:
            spec = Spec(row["problem"], row["representation"], int(row["n_states"]),
                        int(row["horizon"]), row["target"], int(row["unroll"])).validated()
        except (ValueError, TypeError, KeyError) as err:
            self._show(f"Cannot inspect this row: {err}", "danger")
            return False
        self.clear_alert()
        self.busy = True
        self._start(self._inspect_job, spec)
        return True

    def _inspect_job(self, cancel: threading.Event, spec: Spec) -> None:
        future = self._submit(inspect_spec, (spec,), f"inspect {spec.label}")
        try:
            texts = self._wait(future, cancel, lambda what: f"Inspecting {spec.label} — {what}")
        except BaseException as err:  # noqa: BLE001
            self._post(functools.partial(self._show, *_job_failed(f"Inspecting {spec.label}", err)))
            self._post(functools.partial(self._finish_job, "Inspection failed."))
            return
        program = {"title": spec.label}
        for key in ("jaxpr", "stablehlo", "hlo"):
            program[key] = _cut(texts.get(key))
        blame = pd.DataFrame(texts.get("blame") or [])
        order = [c for c in ("eqns", "code", "function", "line", "primitives", "file")
                 if c in blame]
        blame = blame[order + [c for c in blame if c not in order]]

        def publish() -> None:
            self.param.update(program=program, blame_table=blame)
            self._finish_job(f"Programs of {spec.label} shown below.")

        self._post(publish)

    def compare(self) -> bool:
        """Say whether two representations are the same program to XLA (``compare()``), at the
        current problem, N, horizon, unroll and plot target."""
        try:
            a, b = (Spec(self.problem, rep, self.n_states, self.horizon, self.show_target,
                         self.unroll).validated() for rep in (self.compare_a, self.compare_b))
        except (ValueError, TypeError) as err:
            self._show(f"Bad input: {str(err).splitlines()[0]}", "danger")
            return False
        self.clear_alert()
        self.busy = True
        self._start(self._compare_job, a, b)
        return True

    def _compare_job(self, cancel: threading.Event, a: Spec, b: Spec) -> None:
        label = f"{a.representation} vs {b.representation} N={a.n_states}"
        future = self._submit(compare_specs, (a, b), f"compare {label}")
        try:
            result = self._wait(future, cancel, lambda what: f"Comparing {label} — {what}")
        except BaseException as err:  # noqa: BLE001
            self._post(functools.partial(self._show, *_job_failed(f"Comparing {label}", err)))
            self._post(functools.partial(self._finish_job, "Comparison failed."))
            return
        fields = dataclasses.asdict(result) if dataclasses.is_dataclass(result) else {}
        comparison = {
            "title": f"{a.label}  vs  {b.label}",
            "verdict": str(result),
            "same_jaxpr": fields.get("same_jaxpr"),
            "same_hlo": fields.get("same_hlo"),
            "jaxpr_diff": _cut(fields.get("jaxpr_diff")) or "(no difference)",
            "hlo_diff": _cut(fields.get("hlo_diff")) or "(no difference)",
        }

        def publish() -> None:
            self.comparison = comparison
            self._finish_job(f"Compared {label}: {str(result).split(':')[0]}.")

        self._post(publish)

    def _finish_job(self, text: str) -> None:
        busy = self.running or self._jobs_left()
        self.param.update(busy=busy, **({} if self.running else {"status": text}))

    # -- views -------------------------------------------------------------------------
    def _filters(self) -> dict[str, Any]:
        return dict(problem=self.problem, horizon=self.horizon, unroll=self.unroll,
                    target=self.show_target)

    def _view_changed(self, *events: param.parameterized.Event) -> None:
        names = {e.name for e in events}
        if "results" in names:
            self._results_key = frame_key(self.results)
        if names & {"horizon", "unroll"} and (bad := self._bad_view()):
            # Keep the plots as they are: emptying them and titling them "H=None" tells nobody
            # anything. Say what is wrong where the eye is (status) and in the alert.
            self._show(f"Bad input: {bad}", "danger")
            self.status = f"Bad input: {bad} (the plots still show the last valid choice)"
            return
        if names & {"horizon", "unroll"} and self.alert.startswith("Bad input"):
            self.clear_alert()  # the value that was wrong is right again
        which = set()
        if names & {"results", "stage", "problem", "horizon", "unroll", "show_target"}:
            which.add("compile")
        if names & {"results", "problem", "horizon", "unroll", "show_target"}:
            which.add("metrics")
        if "rollout_states" in names:
            which.add("rollout")
        self._redraw(which)

    def _bad_view(self) -> str | None:
        """What is wrong with the horizon or unroll the plots filter on, if anything."""
        try:
            v.check_horizon(self.horizon)
            v.check_unroll(self.unroll)
        except (ValueError, TypeError) as err:
            return str(err).splitlines()[0]
        return None

    def _redraw(self, which: set[str]) -> None:
        """Ask for the plots in ``which`` to be drawn again, on the next turn of the event loop
        when the page gave one (:attr:`dispatch`), else at once."""
        with self._lock:
            first = not self._redraw_pending
            self._redraw_pending |= which
        if first and which:
            if self.dispatch is None:
                self._flush_redraw()
            else:
                self._post(self._flush_redraw)

    def _flush_redraw(self) -> None:
        with self._lock:
            which, self._redraw_pending = self._redraw_pending, set()
        # On a page, the compile-time plot (the one a new result is looked for in) goes out on
        # its own turn, the others on the next: it does not wait for their rendering.
        now = {"compile"} if (self.dispatch is not None and "compile" in which
                              and len(which) > 1) else which
        self.param.update(**{f"_{name}_tick": getattr(self, f"_{name}_tick") + 1
                             for name in sorted(now)})
        if which - now:
            self._redraw(which - now)

    def _after_redraws(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the page's loop once no redraw is waiting (re-posted behind them)."""
        with self._lock:
            waiting = bool(self._redraw_pending)
        if waiting and not self._closed:
            self._post(functools.partial(self._after_redraws, fn))
        else:
            fn()

    def _cached(self, title: str, key: tuple, draw: Callable[[], Any]) -> Any:
        """``draw()`` through :data:`PLOT_CACHE`; a plot that failed is shown, never cached."""
        try:
            return PLOT_CACHE.get(key, draw)
        except Exception as err:  # noqa: BLE001 - shown in the plot and in the alert
            self._show(f"Could not draw {title.lower()}: {type(err).__name__}: {err}")
            return _plots.placeholder(title, "Could not draw this plot (see the alert).")

    def _metric_key(self, kind: str, *extra: Any) -> tuple:
        return (kind, self._results_key, *sorted(self._filters().items()), *extra)

    @param.depends("_compile_tick")
    def compile_plot(self):
        return self._cached("Compile time", self._metric_key("compile", self.stage),
                            lambda: _plots.compile_time_plot(self.results, stage=self.stage,
                                                             **self._filters()))

    @param.depends("_metrics_tick")
    def size_plot(self):
        return self._cached("Program size", self._metric_key("size"),
                            lambda: _plots.program_size_plot(self.results, **self._filters()))

    @param.depends("_metrics_tick")
    def runtime_plot(self):
        return self._cached("Runtime", self._metric_key("runtime"),
                            lambda: _plots.runtime_plot(self.results, **self._filters()))

    @param.depends("_rollout_tick")
    def rollout_plot(self):
        if self._rollout_n is None:
            title = "Rollout trajectories"
        else:
            title = f"Rollouts at N={self._rollout_n} ({self.problem}, H={self.horizon})"
        message = (f"No rollouts for {self.problem}, H={self.horizon} yet: "
                   f"Run with N ≤ {ROLLOUT_MAX_N}.")
        data = tuple(sorted((rep, array_key(names, array))
                            for rep, (names, array) in self._rollout_data.items()))
        states = tuple(self.rollout_states or ())
        return self._cached("Rollouts", ("rollout", data, states, title, message),
                            lambda: _plots.rollout_plot(
                                _plots.rollout_frame(self._rollout_data, states or None),
                                title=title, message=message))

    def plots(self) -> list:
        """The four plots as they are now (for notebooks and export)."""
        return [self.compile_plot(), self.size_plot(), self.rollout_plot(), self.runtime_plot()]

    def _rollout_for(self, row_id: int) -> tuple[list[str], np.ndarray] | None:
        if row_id not in self._rollouts:
            try:
                self._rollouts[row_id] = self.store.rollout(row_id) if row_id > 0 else None
            except StoreError:
                return None
        return self._rollouts[row_id]

    @param.depends("problem", "horizon", "unroll", "n_states", watch=True)
    def _refresh_rollouts(self) -> None:
        """Pick the trajectories to draw: at the chosen N if captured there, else at the most
        recent N that has them; the latest row per representation."""
        rows = _plots.select(self.results, problem=self.problem, horizon=self.horizon,
                             unroll=self.unroll)
        data: dict[str, tuple[list[str], np.ndarray]] = {}
        chosen = None
        if not rows.empty:
            rows = rows[rows["n_states"] <= ROLLOUT_MAX_N].sort_values("finished_at")
            recent = list(dict.fromkeys(rows["n_states"].astype(int).tolist()[::-1]))
            for n in dict.fromkeys([self.n_states, *recent]):
                for record in rows[rows["n_states"] == n].to_dict("records")[::-1]:
                    if record["representation"] in data:
                        continue
                    found = self._rollout_for(int(record["id"]))
                    if found is not None:
                        data[record["representation"]] = found
                if data:
                    chosen = int(n)
                    break
        names: list[str] = []
        for found in data.values():
            names = list(found[0])
            break
        current = [s for s in self.rollout_states if s in names]
        if not current and names:
            current = [names[i] for i in sorted({0, len(names) // 2, len(names) - 1})]
        # The title names the problem and horizon: the same trajectories can be found under
        # another title (an emptied horizon box keeps every horizon), so it is part of the key.
        signature = (chosen, self.problem, self.horizon,
                     tuple(sorted((rep, id(found[1])) for rep, found in data.items())))
        if signature == self._rollout_signature:
            return  # the same trajectories under the same title: no need to draw them again
        self._rollout_signature = signature
        self._rollout_data, self._rollout_n = data, chosen
        self.param.rollout_states.objects = names
        note = (f"Rollouts are captured for N ≤ {ROLLOUT_MAX_N} (at most {MAX_ROLLOUT_VARS} "
                f"states each); shown: N={chosen}." if chosen is not None else
                f"Rollouts are captured for N ≤ {ROLLOUT_MAX_N}; none for this selection yet.")
        self.param.update(rollout_states=current, rollout_note=note)
        self._redraw({"rollout"})

    def table(self) -> pd.DataFrame:
        """The results as the table shows them: newest first, the useful columns."""
        frame = self.results
        if frame is None or frame.empty:
            return pd.DataFrame(columns=list(TABLE_COLUMNS))
        cols = [c for c in TABLE_COLUMNS if c in frame]
        return frame.sort_values("finished_at", ascending=False, na_position="last")[cols] \
            .reset_index(drop=True)

    def csv_bytes(self) -> bytes:
        frame = self.results if self.results is not None else to_frame([])
        cols = [*COLUMNS, *(["source"] if "source" in frame else [])]
        return frame[cols].to_csv(index=False).encode()

    def html_bytes(self) -> bytes:
        """The four plots as one standalone HTML page."""
        return _plots.export_html(self.plots(), title="PyTree Compile Explorer plots")


def _job_failed(what: str, err: BaseException) -> tuple[str, str]:
    if isinstance(err, cf.CancelledError) or getattr(err, "status", None) == "cancelled":
        return f"{what}: cancelled.", "info"
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    return f"{what} failed: {type(err).__name__}: {message}", "danger"


def _cut(text: str | None) -> str | None:
    if text is None:
        return None
    if len(text) <= MAX_TEXT_CHARS:
        return text
    return (text[:MAX_TEXT_CHARS]
            + f"\n\n… cut here: {len(text) - MAX_TEXT_CHARS:,} more characters not shown.")


__all__ = ["ExplorerModel", "N_CHOICES", "ROLLOUT_MAX_N"]
