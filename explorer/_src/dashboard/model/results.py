"""The results a dashboard page shows: stored rows, the shipped example, their trajectories.

Rows measured by this page arrive from a background thread through :meth:`Results.add_row`; rows
stored by others through :meth:`Results.refresh`. :attr:`Results.frame` is what the plots and the
table read.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np
import pandas as pd
import param

from ...store.example import describe_example, load_example
from ...store.store import COLUMNS, TABLE_COLUMNS, Store, StoreError, to_frame
from .session import Batch, Session

__all__ = ["INITIAL_ROWS", "Results"]

# Rows read from the store when a page opens, most recent first.
INITIAL_ROWS = 2000

Rollout = tuple[list[str], np.ndarray]


class Results(param.Parameterized):
    """Measured rows (this page's and the store's) and, when shown, the example sweep.

    Args:
      store: where results are stored and read.
    """

    frame = param.DataFrame(default=None, allow_None=True, precedence=-1,
                            doc="Every row shown: measured (and example, when shown).")
    show_example = param.Boolean(default=False, label="Show the shipped example sweep")
    example_label = param.String(default="", precedence=-1)
    session = param.ClassSelector(class_=Session, precedence=-1)

    def __init__(self, *, store: Store, **params: Any):
        # Asked for (a page's ``?example=true``): shown whatever the store holds.
        self._example_asked = params.get("show_example")
        super().__init__(**params)
        self.store = store
        self._measured = to_frame([]).assign(source=pd.Series(dtype=object))
        self._example = self._measured.iloc[:0]
        self._rollouts: dict[int, Rollout | None] = {}
        self._refresh_since = 0
        self._adding_rows = False
        self._lock = threading.Lock()
        self._rows = Batch(self.session.post,
                           lambda frames: self._add_rows(pd.concat(frames, ignore_index=True)))
        self._load_initial()

    # -- loading -----------------------------------------------------------------------
    def _load_initial(self) -> None:
        try:
            stored = self.store.rows(limit=INITIAL_ROWS)
        except StoreError as err:
            stored = to_frame([])
            self.session.show(f"Could not read the results store: {err}. Showing the example "
                              "sweep; new measurements cannot be saved until this is fixed.",
                              "warning")
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
            # Shown until something was measured here (rows that failed measured nothing).
            nothing = stored.empty or not (stored["status"] == "ok").any()
            self.show_example = (bool(self._example_asked) if self._example_asked is not None
                                 else nothing) and not self._example.empty
        self._publish()

    def latest_ok(self) -> dict[str, Any] | None:
        """The most recent stored measurement that succeeded, if any."""
        frame = self._measured[self._measured["status"] == "ok"]
        return None if frame.empty else frame.sort_values("id").iloc[-1].to_dict()

    def example_case(self) -> dict[str, Any] | None:
        """A row of the shipped example (its loss, when it has one): the case it was swept at."""
        frame = self._example
        if frame.empty:
            return None
        loss = frame[frame["target"] == "loss"]
        return (loss if not loss.empty else frame).iloc[0].to_dict()

    @param.depends("show_example", watch=True)
    def _publish(self) -> None:
        parts = [self._measured]
        if self.show_example and not self._example.empty:
            parts.insert(0, self._example)
        parts = [p for p in parts if not p.empty]
        self.frame = (pd.concat(parts, ignore_index=True) if parts
                      else self._measured.iloc[:0].copy())

    def refresh(self) -> int:
        """Add rows other sessions (or the CLI) stored since the last look; return how many."""
        try:
            new = self.store.rows(since_id=self._refresh_since)
        except StoreError as err:
            self.session.show(f"Could not read the results store: {err}", "warning")
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
            self._measured = (rows if self._measured.empty
                              else pd.concat([self._measured, rows], ignore_index=True))
        self._adding_rows = True
        try:
            self._publish()
        finally:
            self._adding_rows = False
        return len(rows)

    @property
    def adding_rows(self) -> bool:
        """Whether the frame is changing because rows were added (not the example shown or
        hidden): read by the frame's watchers."""
        return self._adding_rows

    # -- from the page's background jobs -----------------------------------------------
    def add_row(self, row: dict[str, Any]) -> None:
        """Store a measured row and hand it to the page (from a background thread): rows that
        finish while the page is busy drawing are added together, not one redraw each."""
        try:
            row["id"] = self.store.add(row, None)
        except StoreError as err:
            # Keep the result in this page even when it cannot be saved.
            row["id"] = -(10**9 + len(self._rollouts) + 1)
            self.session.post(functools.partial(self.session.show,
                                                f"Measured but not stored: {err}", "warning"))
        self._rollouts[int(row["id"])] = None
        self._rows.add(to_frame([row]).assign(source="measured"))

    def add_rollout(self, row_id: int, rollout: Rollout) -> None:
        """Store the trajectories of a measured row (from a background thread)."""
        if row_id > 0:
            try:
                self.store.add_rollout(row_id, rollout)
            except StoreError as err:
                self.session.post(functools.partial(
                    self.session.show, f"Trajectories shown but not stored: {err}", "warning"))
        self._rollouts[row_id] = rollout

    def rollout(self, row_id: int) -> Rollout | None:
        """The trajectories of a row, if captured (read from the store once)."""
        if row_id not in self._rollouts:
            try:
                self._rollouts[row_id] = self.store.rollout(row_id) if row_id > 0 else None
            except StoreError:
                return None
        return self._rollouts[row_id]

    def row(self, row_id: int | None) -> dict[str, Any] | None:
        frame = self.frame
        if row_id is None or frame is None or frame.empty:
            return None
        found = frame[frame["id"] == row_id]
        return None if found.empty else found.iloc[-1].to_dict()

    # -- views of the rows -------------------------------------------------------------
    def table(self) -> pd.DataFrame:
        """The results as the table shows them: newest first, the useful columns.

        ``id`` is the store's id, blank for the example's rows (their ``source`` says so);
        ``key`` (hidden in the page) tells every row apart, the example's included.
        """
        frame = self.frame
        if frame is None or frame.empty:
            return pd.DataFrame(columns=[*TABLE_COLUMNS, "key"])
        cols = [c for c in TABLE_COLUMNS if c in frame]
        out = frame.sort_values("finished_at", ascending=False, na_position="last")[cols] \
            .reset_index(drop=True)
        out["key"] = out["id"]
        out["id"] = [int(i) if i > 0 else "" for i in out["id"]]
        # Text columns a row has no value in (a cancelled row's host, JAX version...) read
        # blank: the browser's table wrote "NaN" where other rows had text.
        text = [c for c in out if c != "id" and out[c].dtype == object]
        out[text] = out[text].astype(object).where(out[text].notna(), "")
        return out

    def csv_bytes(self) -> bytes:
        frame = self.frame if self.frame is not None else to_frame([])
        cols = [*COLUMNS, *(["source"] if "source" in frame else [])]
        return frame[cols].to_csv(index=False).encode()
