"""Your program: the runs ``pytree-explorer watch --store PATH script.py`` kept in the page's
store, one at a time: its functions ranked by compile time, and the findings of a selected one.

Read-only and on demand (:meth:`WatchedPrograms.load`, when the tab opens or is reloaded): the
store's watch tables are read with :func:`explorer._src.store.watched.load`, and the ranking is
the one ``explorer.watch``'s ``summary()`` makes (:func:`explorer._src.core.ranking.rank_compiles`).
"""

from __future__ import annotations

import html
import json
import shlex
from typing import Any

import pandas as pd
import param

from ...core.ranking import rank_compiles
from ...store.store import Store
from ...store.watched import load

__all__ = ["WatchedPrograms"]

# The ranking's columns as the tab's table shows them.
TABLE_COLUMNS = ("name", "where", "compiles", "compile_s", "share", "trace_s", "lower_s",
                 "eqns", "hlo_pre_bytes", "n_leaves", "cache_hits", "reason")


def _seconds(value: Any) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{float(value):.3g} s"


def _e(value: Any) -> str:
    # Names, paths and messages come from the user's program: shown as text, never as markup.
    return html.escape(str(value), quote=False).replace("*", r"\*").replace("_", r"\_")


class WatchedPrograms(param.Parameterized):
    """The watched runs of ``store``, one shown (``watch_run``), and its ranking and findings."""

    watch_run = param.Selector(default=None, objects=[], allow_None=True, label="Watched run")
    watch_selected = param.Integer(default=None, allow_None=True, precedence=-1,
                                   doc="Row of watch_ranking whose findings are shown.")
    watch_ranking = param.DataFrame(default=None, allow_None=True, precedence=-1,
                                    doc="rank_compiles of the run shown: a row per function.")
    watch_headline = param.String(default="", precedence=-1)
    watch_findings = param.String(default="", precedence=-1)

    def __init__(self, *, store: Store, **params: Any):
        super().__init__(**params)
        self.store = store
        self._runs = self._compiles = self._findings = pd.DataFrame()
        self.param.watch(self._show, "watch_run")
        self.param.watch(self._select, "watch_selected")

    def load(self) -> int:
        """Read the store's watched runs again (the newest shown unless one is chosen); returns
        how many there are."""
        try:
            self._runs, self._compiles, self._findings = load(self.store.path)
        except Exception as err:  # noqa: BLE001 - a damaged or foreign file: said, not raised
            self._runs = self._compiles = self._findings = pd.DataFrame()
            self.param.update(watch_run=None, watch_ranking=None, watch_findings="",
                              watch_headline=f"Could not read watched runs from "
                              f"{self.store.path}: {str(err).splitlines()[0]}")
            return 0
        choices = {self._label(r): r.run_id for r in self._runs[::-1].itertuples()} if len(
            self._runs) else {}
        self.param.watch_run.objects = choices
        current = self.watch_run if self.watch_run in choices.values() else next(
            iter(choices.values()), None)
        if current == self.watch_run:
            self._show()
        else:
            self.watch_run = current  # the watcher shows it
        return len(choices)

    @staticmethod
    def _label(run: Any) -> str:
        program = " ".join(shlex.quote(a) for a in json.loads(run.argv or "[]")) or run.program
        return f"{run.started_at} · {program} · {run.n_compiles} compiles"

    def _show(self, *events: Any) -> None:
        if self.watch_run is None:
            self.param.update(watch_ranking=None, watch_selected=None, watch_findings="",
                              watch_headline=(
                                  f"No watched program in {self.store.path} yet. Run "
                                  f"`pytree-explorer watch --store {self.store.path} "
                                  "script.py [args...]` and reload this tab."))
            return
        run = self._runs[self._runs["run_id"] == self.watch_run].iloc[0]
        compiles = self._compiles[self._compiles["run_id"] == self.watch_run]
        ranking = rank_compiles(compiles.drop(columns=["run_id", "seq"]))
        share = (f"; compilation took {run.total_s / run.wall_s:.0%} of its {run.wall_s:.3g} s "
                 "wall time" if run.wall_s else "")
        status = "" if run.status == 0 else f" It exited with status {run.status}."
        headline = (f"{len(compiles)} compilation(s) of {len(ranking)} function(s): XLA compile "
                    f"{_seconds(run.compile_s)}{share} (jax {run.jax_version}, {run.backend}, "
                    f"{run.host}).{status}")
        self.param.update(watch_ranking=ranking, watch_headline=headline,
                          watch_selected=0 if len(ranking) else None)
        self._select()

    def _select(self, *events: Any) -> None:
        ranking, index = self.watch_ranking, self.watch_selected
        if ranking is None or index is None or not 0 <= index < len(ranking):
            self.watch_findings = ""
            return
        row = ranking.iloc[index]
        lines = [f"**{_e(row['name'])}** at `{html.escape(str(row['where']))}`: "
                 f"{int(row['compiles'])} compile(s), XLA compile {_seconds(row['compile_s'])}"
                 + ("" if pd.isna(row["share"]) else f", {row['share']:.0%} of the program's compile time")
                 + "."]
        if isinstance(row["reason"], str):
            lines.append(f"\n**Compiled again** because: {_e(row['reason'])}")
        found = self._findings
        if len(found):
            found = found[(found["run_id"] == self.watch_run) & (found["name"] == row["name"])
                          & (found["where"] == row["where"])]
        if not len(found):
            lines.append("\nNo findings were stored for it: the watch diagnoses the functions "
                         "over its `--top` share of the compile time (findings on), and this one "
                         "was not among them.")
        for f in found.itertuples():
            if isinstance(f.note, str) and not isinstance(f.kind, str):
                lines.append(f"\n{_e(f.note)}")
                continue
            lines.append(f"\n- **[{_e(f.kind)}]** {_e(f.message)}")
            if isinstance(f.remedy, str):
                lines.append(f"    - remedy: {_e(f.remedy.split(chr(10) * 2, 1)[0])}")
            if isinstance(f.saving, str):
                lines.append(f"    - saving: {_e(f.saving)}")
        self.watch_findings = "\n".join(lines)
