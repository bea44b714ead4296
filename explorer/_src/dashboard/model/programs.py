"""The programs behind a result: inspect one (jaxpr, StableHLO, HLO, blame), compare two.

Both run in the worker as program jobs of the page's :class:`JobQueue`: after every
measurement, giving way to anyone's Run (see :mod:`.submission`). The programs of a row that
was never measured (cancelled, timed out, failed) are compiled first: the page says what that
may cost, from the rows measured like it, and waits for the user's go (:meth:`confirm_inspect`).
"""

from __future__ import annotations

import dataclasses
import threading

import pandas as pd
import param

from ... import plots as _plots
from ...core.representations import REPRESENTATIONS
from ...core.spec import Spec
from ...jobs.jobs import compare_specs, inspect_spec
from .controls import CaseControls, representations_of
from .jobs import JobQueue
from .results import Results
from .session import Session
from .view import PlotView

__all__ = ["MAX_TEXT_CHARS", "ProgramInspector"]

# Program text longer than this is cut in the page (a dict program at N=1000 is megabytes).
MAX_TEXT_CHARS = 200_000


class ProgramInspector(param.Parameterized):
    """The selected result's programs, and the comparison of two representations."""

    selected = param.Integer(default=None, allow_None=True, precedence=-1,
                             doc="Id of the result whose programs to inspect.")
    program = param.Dict(default={}, precedence=-1,
                         doc="title, jaxpr, stablehlo, hlo texts of the inspected result.")
    blame_table = param.DataFrame(default=None, allow_None=True, precedence=-1)
    compare_a = param.Selector(default="dict", objects=list(REPRESENTATIONS), label="Compare")
    compare_b = param.Selector(default="array", objects=list(REPRESENTATIONS), label="with")
    comparison = param.Dict(default={}, precedence=-1, doc="verdict and diffs of a comparison.")
    confirm = param.Dict(default={}, precedence=-1, doc="""
        A program request waiting for the user's go: ``row_id`` and ``message`` (what it will
        cost); empty when none waits.""")

    session = param.ClassSelector(class_=Session, precedence=-1)
    controls = param.ClassSelector(class_=CaseControls, precedence=-1)
    results = param.ClassSelector(class_=Results, precedence=-1)
    view = param.ClassSelector(class_=PlotView, precedence=-1)
    jobs = param.ClassSelector(class_=JobQueue, precedence=-1)

    def __init__(self, **params):
        super().__init__(**params)
        self.controls.param.watch(self._offer_representations, "problem")
        self._offer_representations()

    def _offer_representations(self, *_events) -> None:
        """Compare only representations the problem can be measured in."""
        offered = representations_of(self.controls.problem)
        updates = {}
        for name, fallback in (("compare_a", "dict"), ("compare_b", "array")):
            self.param[name].objects = offered
            if getattr(self, name) not in offered:
                updates[name] = fallback if fallback in offered else offered[0]
        if updates:
            self.param.update(**updates)

    @param.depends("selected", watch=True)
    def _selection_changed(self) -> None:
        if self.confirm and self.confirm.get("row_id") != self.selected:
            self.confirm = {}  # the go asked for was for another row

    def inspect(self, row_id: int | None = None, confirmed: bool = False) -> bool:
        """Fetch the jaxpr, StableHLO, optimised HLO and equation blame of a result (the
        selected one by default); the work runs in the worker after every measurement.

        A row that was never measured is compiled first: unless ``confirmed``, the request
        waits in :attr:`confirm`, saying what it will cost, and ``False`` is returned."""
        row_id = self.selected if row_id is None else row_id
        row = self.results.row(row_id)
        if row is None:
            self.session.show("Select a row of the results table first.", "warning")
            return False
        try:
            spec = Spec(row["problem"], row["representation"], int(row["n_states"]),
                        int(row["horizon"]), row["target"], int(row["unroll"])).validated()
        except (ValueError, TypeError, KeyError) as err:
            self.session.show(f"Cannot inspect this row: {err}", "danger")
            return False
        if row.get("status") not in (None, "ok") and not confirmed:
            # The status first: the go button appears with ``confirm``, and the page that shows
            # it should already say what it waits for.
            self.session.status = (f"Programs of row {row_id}: waiting for your go "
                                   "(it was never measured).")
            self.confirm = {"row_id": row_id, "message": program_cost(row, self.results.frame)}
            return False
        self.confirm = {}
        note = _before_inspecting(row_id, row)
        if note:
            self.session.show(note, "warning")
        else:
            self.session.clear_alert()
        self.jobs.begin(f"Inspecting {spec.label}…")
        self.jobs.start(self._inspect_job, spec)
        return True

    def confirm_inspect(self) -> bool:
        """Go on with the program request waiting in :attr:`confirm`."""
        if not self.confirm:
            return False
        return self.inspect(self.confirm["row_id"], confirmed=True)

    def _inspect_job(self, cancel: threading.Event, spec: Spec) -> None:
        try:
            texts = self.jobs.program(inspect_spec, (spec,), f"inspect {spec.label}", cancel,
                                      lambda what: f"Inspecting {spec.label} — {what}")
        except BaseException as err:  # noqa: BLE001
            self.jobs.failed(f"Inspecting {spec.label}", err, "Inspection failed.")
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
            self.jobs.finish_job(f"Programs of {spec.label} shown below.")

        self.session.post(publish)

    def compare(self) -> bool:
        """Say whether two representations are the same program to XLA (``compare()``), at the
        current problem, N, horizon, unroll and plot target."""
        c = self.controls
        try:
            a, b = (Spec(c.problem, rep, c.n_states, c.horizon, self.view.show_target,
                         c.unroll).validated() for rep in (self.compare_a, self.compare_b))
        except (ValueError, TypeError) as err:
            self.session.show(f"Bad input: {str(err).splitlines()[0]}", "danger")
            return False
        self.session.clear_alert()
        label = f"{a.representation} vs {b.representation} N={a.n_states}"
        self.jobs.begin(f"Comparing {label}…")
        self.jobs.start(self._compare_job, a, b, label)
        return True

    def _compare_job(self, cancel: threading.Event, a: Spec, b: Spec, label: str) -> None:
        try:
            result = self.jobs.program(compare_specs, (a, b), f"compare {label}", cancel,
                                       lambda what: f"Comparing {label} — {what}")
        except BaseException as err:  # noqa: BLE001
            self.jobs.failed(f"Comparing {label}", err, "Comparison failed.")
            return
        fields = dataclasses.asdict(result) if dataclasses.is_dataclass(result) else {}
        comparison = {
            "title": f"{a.label}  vs  {b.label}",
            "verdict": str(result),
            "same_jaxpr": fields.get("same_jaxpr"),
            "same_hlo": fields.get("same_hlo"),
            "jaxpr_diff": _cut(fields.get("jaxpr_diff")) or "(no difference)",
            "hlo_diff": _cut(fields.get("hlo_diff")) or "(no difference)",
            "labels": tuple(fields.get("labels") or ("a", "b")),
            "op_summary": getattr(result, "op_summary", ""),
            "distinct": tuple(fields.get("distinct") or ()),
        }

        def publish() -> None:
            self.comparison = comparison
            self.jobs.finish_job(f"Compared {label}: {str(result).split(':')[0]}.")

        self.session.post(publish)


# Above this many jaxpr equations (or, unmeasured, this many states) printing the programs takes
# minutes on a laptop: said before it starts.
LARGE_EQNS, LARGE_N = 50_000, 1000


def program_cost(row: dict, frame: pd.DataFrame | None) -> str:
    """What showing the programs of ``row``, which was never measured, will cost: it is
    compiled first; the rows measured like it (same problem, representation, target, horizon
    and unroll, another N) say how long that took nearest its N. No projection: the measured
    figures, and which way this N lies from them."""
    n = int(row["n_states"])
    head = (f"Row of {row['problem']}/{row['representation']} N={n:,} {row['target']} is "
            f"{row.get('status')}: it was never measured, so showing its programs compiles "
            "it first (then prints them), in the shared worker after every Run.")
    like = _plots.select(frame, problem=row["problem"], horizon=row["horizon"],
                         unroll=row["unroll"], target=row["target"],
                         representations=[row["representation"]])
    if not like.empty and "source" in like:
        like = like[like["source"] == "measured"]  # the example came from another machine
    like = like[like["n_states"] != n] if not like.empty else like
    if not like.empty:
        like = like.assign(total=like[["trace_s", "lower_s", "compile_s"]].astype(float)
                           .sum(axis=1, min_count=3)).dropna(subset=["total"])
    if like is None or like.empty:
        size = (f" At N = {n:,} a per-name program may take minutes." if n >= LARGE_N else "")
        return (f"{head} Nothing like it is measured here, so its cost is unknown.{size} "
                "Cancel stops it.")
    below = like[like["n_states"] < n].sort_values("n_states")
    above = like[like["n_states"] > n].sort_values("n_states")
    said = []
    if not below.empty:
        m, t = int(below["n_states"].iloc[-1]), float(below["total"].iloc[-1])
        said.append(f"N={m:,} took {t:.1f} s to trace, lower and compile; N={n:,} is "
                    f"{n / m:.3g}× as many states: expect longer")
    if not above.empty:
        m, t = int(above["n_states"].iloc[0]), float(above["total"].iloc[0])
        said.append(f"N={m:,} took {t:.1f} s: expect less than that")
    return f"{head} Measured like it: {'; '.join(said)}. Cancel stops it."


def _before_inspecting(row_id: int | None, row: dict) -> str:
    """What the user should know before a row's programs are fetched: what the row is, and how
    big its program is (measured) or may be; empty for an ordinary small row."""
    notes = []
    status = row.get("status")
    if status not in (None, "ok"):
        notes.append(f"Row {row_id} is {status}: it has no measurement, so its programs are "
                     "traced, lowered and compiled now.")
    eqns = pd.to_numeric(row.get("jaxpr_eqns"), errors="coerce")
    if pd.notna(eqns) and eqns > 0:
        if eqns > LARGE_EQNS:
            notes.append(f"Its program is large ({int(eqns):,} jaxpr equations): building and "
                         "printing it may take minutes.")
    elif int(row.get("n_states") or 0) >= LARGE_N:
        notes.append(f"Its size is unknown (not measured) and N = {int(row['n_states']):,}: "
                     "a per-name program this size may take minutes.")
    if notes:
        notes.append("The status line shows the stage; Cancel stops it.")
    return " ".join(notes)


def _cut(text: str | None) -> str | None:
    if text is None:
        return None
    if len(text) <= MAX_TEXT_CHARS:
        return text
    return (text[:MAX_TEXT_CHARS]
            + f"\n\n… cut here: {len(text) - MAX_TEXT_CHARS:,} more characters not shown.")

