"""What a page's status line and alert say about its jobs: progress, refusals, failures.

One place turns where a job is (:class:`explorer._src.jobs.protocol.JobPlace`, asked of any
executor that can tell) and how it ended into words; the job code only reports events.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
from collections.abc import Callable
from typing import Any

from ...jobs import run as _run
from ...jobs.protocol import JobExecutor, JobPlace
from .session import Batch, Session

__all__ = ["StatusLine", "job_failed", "progress_text"]

_STATUS_WORDS = {
    "timeout": "Timed out",
    "crashed": "The worker crashed on",
    "oom": "Out of memory on",
    "cancelled": "Cancelled",
    "error": "Failed",
}


def job_failed(what: str, err: BaseException) -> tuple[str, str]:
    """The alert (message, kind) for a background job that raised ``err``."""
    if isinstance(err, cf.CancelledError) or getattr(err, "status", None) == "cancelled":
        return f"{what}: cancelled.", "info"
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    return f"{what} failed: {type(err).__name__}: {message}", "danger"


def progress_text(place: JobPlace | None, done: bool = False) -> str:
    """Where a job is, in a few words (``None``: the executor cannot tell)."""
    if place is None:
        return "running"
    if place.remote:
        return "on the cluster" + (", finishing" if done else "")
    if place.position == 0 and place.elapsed_s is not None:
        return f"stage {place.stage or '…'}, {place.elapsed_s:.1f} s"
    if place.position == 1 and (place.running or "").startswith(_run.PREPARING):
        # A case being built ahead (most likely this page's own): not a queue.
        return f"starting: the worker is {place.running}"
    if place.position:
        return (f"waiting in the shared queue, position {place.position}"
                + (f" (running now: {place.running})" if place.running else ""))
    return "finishing"


class StatusLine:
    """The status line of one page while its jobs run.

    Progress arrives from background threads faster than a page draws: only the latest line of
    a burst is shown, and only while a job runs (``busy``). After Cancel, progress no longer
    overwrites "Cancelling…": the next line is how the job ended.

    Args:
      session: the page's messages.
      busy: whether any job of the page is in progress.
    """

    def __init__(self, session: Session, busy: Callable[[], bool]):
        self.session = session
        self._busy = busy
        self._cancelling = False
        self._refusals: tuple[str, int] = ("", 0)
        self._lines = Batch(session.post, self._show)

    # -- progress ----------------------------------------------------------------------
    def on_wait(self, executor: Any, describe: Callable[[str], str]
                ) -> Callable[[cf.Future], None]:
        """An ``on_wait`` for :func:`explorer._src.jobs.run.wait`: posts where the job is."""
        def on_wait(future: cf.Future) -> None:
            place = executor.place(future) if isinstance(executor, JobExecutor) else None
            self.progress(describe(progress_text(place, future.done())))

        return on_wait

    def progress(self, text: str) -> None:
        """Show ``text`` on the page's next turn (from any thread) unless a newer line comes."""
        self._lines.add(text)

    def _show(self, texts: list[str]) -> None:
        if self._busy() and not self._cancelling:
            self.session.status = texts[-1]

    # -- starting and stopping ---------------------------------------------------------
    def started(self, text: str) -> None:
        """A job was started: say so, and let its progress show."""
        self._cancelling = False
        self._refusals = ("", 0)
        self.session.status = text

    def cancelling(self) -> None:
        self._cancelling = True
        self.session.status = "Cancelling…"

    def ended(self, text: str) -> None:
        """The page's jobs ended: ``text`` says how."""
        self._cancelling = False
        self.session.status = text

    def refused(self, kind: str, message: str) -> None:
        """``kind`` (Run, Sweep) did not start because of bad input: said in the alert and the
        status line. Pressed again with the same input, the status line says so (a line equal
        to the one shown would not reach a page whose browser already wrote over it)."""
        same, count = self._refusals
        count = count + 1 if same == (kind, message) else 1
        self._refusals = ((kind, message), count)
        self.session.show(f"Bad input: {message}", "danger")
        again = f" again ({count} presses)" if count > 1 else ""
        self.session.status = f"{kind} not started{again}: {message}"

    def input_fixed(self) -> None:
        """The input that was refused is valid now: its alert and refusal go."""
        if self.session.alert.startswith("Bad input"):
            self.session.clear_alert()
        if self._refusals[1] and " not started" in self.session.status:
            self.session.status = "Ready: press Run."
        self._refusals = ("", 0)

    # -- failures ----------------------------------------------------------------------
    def failed(self, what: str, err: BaseException) -> None:
        """Report (from a background thread) a job that raised ``err``."""
        self.session.post(functools.partial(self.session.show, *job_failed(what, err)))

    def row_failed(self, row: dict[str, Any]) -> None:
        """Say (on the page) why a measured row is not ``ok``."""
        status = row.get("status", "error")
        word = _STATUS_WORDS.get(status, "Failed")
        label = (f"{row.get('problem')}/{row.get('representation')} N={row.get('n_states')} "
                 f"H={row.get('horizon')} {row.get('target')}")
        if status == "cancelled":
            self.session.show(f"{word}: {label}. Measurements already taken are kept.", "info")
            return
        error = (row.get("error") or "").strip()
        if error and not error.endswith((".", "!", "?")):
            error += "."  # a sentence of its own before the next
        self.session.show(f"{word}: {label}. {error} The server keeps running; "
                          "measurements already taken are kept.", "danger")
