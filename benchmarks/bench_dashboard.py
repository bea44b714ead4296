"""Dashboard timings, measured in a real browser against ``panel serve``.

    python benchmarks/bench_dashboard.py [--quick] [--out benchmarks/results-dashboard.json]

(``run_benchmarks.py`` runs this too, as its part d.) Drives Debian's chromium with Playwright
against ``panel serve apps/explorer_app.py`` on 127.0.0.1 with a throw-away results store:

* server start -> HTTP ready; server ready -> first render (the four plots drawn on their
  canvases and the Run button on the page) and -> page complete (the results table has rows);
* click Run (timed from the press as the page saw it, its ``pointerdown``) -> "queued" in the
  status line; -> first result (the first measured case drawn in
  the compile-time plot, read off the Bokeh data in the page every 10 ms); -> run finished (the
  status line), for the default case (decay, N=100, H=200, dict and array, loss), first on a
  fresh server and again warm;
  *beyond the measurement* subtracts that first case's own measurement time, as the worker
  stamped it in the store (``finished_at - started_at``: trace, lower, compile and runs);
* widget response while a long compile runs (dict at N=3000 in the worker) against the same
  interaction when idle, two ways: a widget round trip (pick an N preset until the server has
  copied it into the N entry) and a plot update (change the "Compile time: stage" select until
  the compile-time plot in the page has its new lines);
* memory per additional browser session: the server's resident memory as sessions are opened
  on a fresh server (before any run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # common.py, when imported from elsewhere
    sys.path.insert(0, str(HERE))

from common import cpu_reference_s, host_info, loadavg, summary  # noqa: E402

ROOT = HERE.parent
APP = ROOT / "apps" / "explorer_app.py"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def available() -> str | None:
    """Why the dashboard cannot be benchmarked here, or ``None`` when it can."""
    if not APP.exists() or not (ROOT / "explorer" / "_src" / "dashboard" / "page.py").exists():
        return "the dashboard (apps/explorer_app.py, explorer/_src/dashboard/page.py) does not exist"
    if not Path(CHROMIUM).exists():
        return f"no chromium at {CHROMIUM}"
    try:
        import playwright.sync_api  # noqa: F401, PLC0415
    except ImportError:
        return "playwright is not installed"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class _Server:
    """``panel serve`` in its own session, with a private store; stopped on exit."""

    def __init__(self, workdir: Path, app: Path = APP, store: Path | None = None):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/{app.stem}"
        self.store = store or workdir / "results.sqlite"
        env = {**os.environ, "PYTREE_EXPLORER_DB": str(self.store),
               "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
        self.log = (workdir / f"server-{app.stem}.log").open("w")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "panel", "serve", str(app), "--port", str(self.port),
             "--address", "127.0.0.1", "--allow-websocket-origin", f"127.0.0.1:{self.port}"],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 180) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"panel serve exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url, timeout=30) as response:
                    response.read()
                return time.perf_counter() - self.started
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("panel serve did not answer in time")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)  # the server and its measurement worker
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        self.log.close()


# Every element of the page, through the shadow roots Bokeh and Panel draw into (JavaScript,
# pasted at the top of the snippets below).
_ALL_NODES = """
  const allNodes = () => {
    const nodes = [], stack = [document];
    while (stack.length) {
      const node = stack.pop();
      if (node.shadowRoot) stack.push(node.shadowRoot);
      const kids = node.children || [];
      for (let i = 0; i < kids.length; i++) stack.push(kids[i]);
      nodes.push(node);
    }
    return nodes;
  };
"""

# Counts the Bokeh canvases drawn in the page.
_CANVASES = "() => {" + _ALL_NODES + """
  return allNodes().filter(n => n.classList && n.classList.contains('bk-Canvas')).length;
}"""


def _open(browser: Any, url: str) -> tuple[Any, float, float]:
    """A new browser session on the page; returns it, the seconds until the four plots and the
    Run button were drawn (first render), and until the results table had rows (complete)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    t0 = time.perf_counter()
    page.goto(url)
    page.get_by_role("button", name="Run", exact=True).wait_for(timeout=120_000)
    page.wait_for_function(f"() => ({_CANVASES})() >= 4", timeout=120_000, polling=10)
    rendered = time.perf_counter() - t0
    page.locator(".tabulator-row").first.wait_for(timeout=120_000)
    return page, rendered, time.perf_counter() - t0


# Records every change of the page's status line (found through the shadow roots) with the
# page's clock, every 10 ms, so a state that lasts a moment is not missed.
_STATUS_LOGGER = "() => {" + _ALL_NODES + """
  if (window.__statusLog) return;
  window.__statusLog = [];
  let el = null, last = null;
  const find = () => {
    const strong = allNodes().find(n => n.tagName === 'STRONG'
                                        && n.textContent.trim() === 'Status:');
    return strong ? strong.parentElement : null;
  };
  setInterval(() => {
    if (!el || !el.isConnected) el = find();
    const text = el ? el.textContent : null;
    if (text !== last) { last = text; window.__statusLog.push([performance.now(), text]); }
  }, 10);
}"""


# Records, with the page's clock, every change of what the compile-time plot holds: how many
# data sources it has (one per line, and one for the points) and the sum of their times. A
# result that reaches the plot changes the sum; a stage change changes the count.
_PLOT_LOGGER = """() => {
  if (window.__plotLog) return;
  window.__plotLog = [];
  let last = null;
  // Walks the views on the page (a document keeps models it no longer shows).
  const probe = () => {
    let sources = 0, total = 0;
    const index = window.Bokeh ? Bokeh.index : {};
    const seen = new Set();
    const walk = (view) => {
      if (!view || seen.has(view)) return;
      seen.add(view);
      const source = view.model && view.model.data_source;
      if (source && source.data && source.data.seconds_compile !== undefined) {
        sources++;
        for (const x of source.data.seconds_compile) total += Number(x) || 0;
      }
      if (typeof view.children === 'function') for (const child of view.children()) walk(child);
    };
    for (const root of (index instanceof Map ? index.values() : Object.values(index))) walk(root);
    return sources + ':' + total.toPrecision(12);
  };
  setInterval(() => {
    const now = probe();
    if (now !== last) { last = now; window.__plotLog.push([performance.now(), now]); }
  }, 10);
}"""


def _plot_changed(page: Any, since_ms: float, timeout: float, sources: bool = False) -> float:
    """Seconds from ``since_ms`` (page clock) to the first change of the compile-time plot (of
    its number of data sources when ``sources``) after that moment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = page.evaluate("window.__plotLog")
        before = [text for stamp, text in log if stamp <= since_ms]
        base = before[-1] if before else None
        for stamp, text in log:
            if stamp > since_ms and text != base and (
                    not sources or base is None or text.split(":")[0] != base.split(":")[0]):
                return (stamp - since_ms) / 1000.0
        time.sleep(0.02)
    raise TimeoutError(f"the compile-time plot did not change in {timeout:g} s")


def _wait_status(page: Any, since_ms: float, pattern: re.Pattern, timeout: float) -> float:
    """Seconds from ``since_ms`` (page clock) to the first status text matching ``pattern``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for stamp, text in page.evaluate("window.__statusLog"):
            if stamp > since_ms and text and pattern.search(text):
                return (stamp - since_ms) / 1000.0
        time.sleep(0.05)
    raise TimeoutError(f"no status matching {pattern.pattern!r} in {timeout:g} s")


def _status_now(page: Any) -> str:
    log = page.evaluate("window.__statusLog")
    return (log[-1][1] or "") if log else ""


_FINISHED = re.compile(r"Run finished(?!.*press Cancel)")


def _click_run(page: Any, store: Path, timeout: float = 600) -> dict[str, float | None]:
    """Click Run and time it: to "queued" in the status line, to the first result drawn in the
    compile-time plot, to the run's end (the status line), and the first result's own
    measurement time (from the store)."""
    page.evaluate(_STATUS_LOGGER)
    page.evaluate(_PLOT_LOGGER)
    button = page.get_by_role("button", name="Run", exact=True)
    button.wait_for()
    _settle(page)  # the last run's final redraw is over (it may come after "Run finished")
    page.evaluate(_PRESS_LOGGER)
    clicked = time.time()
    button.click()
    # From the press itself, as the page saw it: Playwright spends 20-40 ms finding and
    # checking the button before it presses, which no user waits for.
    since = _pressed_at(page)
    first = _plot_changed(page, since, timeout)
    # Not the last run's "Run finished" shown again for a moment with "(press Cancel to stop)"
    # as the page turns busy, before it says "queued".
    done = _wait_status(page, since, _FINISHED, timeout)
    try:  # logged long before this, if the page ever showed it
        queued: float | None = _wait_status(page, since, re.compile("queued"), 1)
    except TimeoutError:
        queued = None  # the status went past "queued" between two reads of the page
    own = _first_measurement_s(store, clicked)
    return {"first": first, "done": done, "own": own, "queued": queued,
            "beyond": first - own if own is not None else None}


# Stamps, with the page's clock, the moment the mouse button goes down anywhere on the page
# (in the capture phase: before any widget handles it).
_PRESS_LOGGER = """() => {
  window.__pressedAt = null;
  if (!window.__pressLogger) {
    window.__pressLogger = true;
    window.addEventListener('pointerdown', () => { window.__pressedAt = performance.now(); },
                            true);
  }
}"""


def _pressed_at(page: Any, timeout: float = 10) -> float:
    """The page-clock time of the press :data:`_PRESS_LOGGER` saw last."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stamp = page.evaluate("window.__pressedAt")
        if stamp is not None:
            return float(stamp)
        time.sleep(0.01)
    raise TimeoutError("the page saw no press")


def _settle(page: Any, quiet_s: float = 1.5, timeout: float = 120) -> None:
    """Wait until the compile-time plot has not changed for ``quiet_s``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = page.evaluate("window.__plotLog")
        now = page.evaluate("performance.now()")
        if log and now - log[-1][0] >= quiet_s * 1000:
            return
        time.sleep(0.1)
    raise TimeoutError("the page did not settle")


def _first_measurement_s(store: Path, since: float) -> float | None:
    """Seconds the first row stored after ``since`` took to measure (its trace, lower, compile
    and runs: ``finished_at - started_at``, as the worker stamped them)."""
    import sqlite3  # noqa: PLC0415

    con = sqlite3.connect(store)
    try:
        found = con.execute("SELECT started_at, finished_at FROM measurements WHERE "
                            "started_at >= ? AND status = 'ok' ORDER BY id LIMIT 1",
                            (since,)).fetchone()
    finally:
        con.close()
    return None if found is None else float(found[1]) - float(found[0])


def _stage_select(page: Any) -> Any:
    return page.locator(".bk-input-group", has_text="Compile time: stage").locator("select")


def _toggle_stage(page: Any) -> list[float]:
    """Plot updates: pick "all stages", then "total", each until the compile-time plot in the
    page has its new lines (three per representation, then one)."""
    page.evaluate(_PLOT_LOGGER)
    select = _stage_select(page)
    times = []
    for value in ("all stages", "total"):
        time.sleep(SETTLE_S)
        since = page.evaluate("performance.now()")
        select.select_option(value)
        times.append(_plot_changed(page, since, 120, sources=True))
    return times


# Picks a value in the select of one labelled input group and returns the milliseconds until
# the input of another group shows it (both timed with the page's clock, polled every 2 ms).
_ROUND_TRIP = "async ([selectLabel, inputLabel, value]) => {" + _ALL_NODES + """
  const nodes = allNodes();
  const group = (label) => nodes.find(n => n.classList && n.classList.contains('bk-input-group')
                                         && n.textContent.includes(label));
  const select = group(selectLabel).querySelector('select');
  const input = group(inputLabel).querySelector('input');
  const t0 = performance.now();
  select.value = value;
  select.dispatchEvent(new Event('input', {bubbles: true}));
  select.dispatchEvent(new Event('change', {bubbles: true}));
  while (input.value.replace(/,/g, '') !== value) {
    if (performance.now() - t0 > 120000) return null;
    await new Promise(resolve => setTimeout(resolve, 2));
  }
  return performance.now() - t0;
}"""

SETTLE_S = 1.5  # between two probes: each change is timed alone, not queued behind the last


def _toggle_n(page: Any) -> list[float]:
    """Widget round trips: pick an N preset until the server has copied it into the N entry
    (timed in the page). Each change starts on a settled page: the previous one's plot redraw
    is over, so a probe times one user action, not a queue of them."""
    times = []
    for value in ("30", "10"):
        time.sleep(SETTLE_S)
        ms = page.evaluate(_ROUND_TRIP, ["State count N (presets)", "or any N", value])
        if ms is None:
            raise TimeoutError(f"the N entry never showed {value}")
        times.append(ms / 1000.0)
    return times


def _probe_while_busy(page: Any, probe: Any, rounds: int, busy: re.Pattern) -> tuple[list[float], int]:
    """Probe timings taken while the status shows ``busy`` before and after; and how many were."""
    kept, skipped = [], 0
    for _ in range(rounds):
        before = bool(busy.search(_status_now(page)))
        times = probe(page)
        if before and busy.search(_status_now(page)):
            kept += times
        else:
            skipped += 1
    return kept, skipped


def run(quick: bool = False) -> dict[str, Any]:
    """All dashboard timings; figures are seconds and bytes."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    rounds = 3 if quick else 4
    sessions = 4 if quick else 6
    out: dict[str, Any] = {"rounds": rounds, "sessions": sessions, "errors": [],
                           "machine": host_info(), "cpu_reference_start_s": cpu_reference_s()}
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as tmp:
        server = _Server(Path(tmp))
        try:
            out["server_ready_s"] = server.wait_ready()
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    page, first_render, _ = _open(browser, server.url)
                    out["first_render_browser_start_s"] = first_render

                    # Memory per additional session, on a fresh server (before any run, so the
                    # heap has no freed space for new sessions to reuse unseen).
                    time.sleep(1.0)
                    rss = [_rss_bytes(server.proc.pid)]
                    extra_pages, renders = [], []
                    for _ in range(sessions - 1):
                        extra, seconds, _ = _open(browser, server.url)
                        extra_pages.append(extra)
                        renders.append(seconds)
                        time.sleep(1.0)  # let the session settle
                        rss.append(_rss_bytes(server.proc.pid))
                    steps = [(b - a) for a, b in zip(rss, rss[1:]) if a is not None and b is not None]
                    out["rss_one_session_bytes"] = rss[0]
                    out["rss_by_sessions_bytes"] = rss
                    out["rss_per_session_bytes"] = summary(steps)
                    out["first_render_with_sessions_open_s"] = summary(renders)
                    for extra in extra_pages:  # their periodic refreshes must not load the server
                        extra.context.close()

                    # First render as a user with a running browser sees it: one page at a time,
                    # each in a fresh browser context (nothing cached), closed afterwards.
                    renders, completes = [], []
                    for _ in range(rounds + 1):
                        time.sleep(1.0)
                        fresh, seconds, complete = _open(browser, server.url)
                        fresh.context.close()
                        renders.append(seconds)
                        completes.append(complete)
                    out["first_render_s"] = summary(renders)
                    out["page_complete_s"] = summary(completes)

                    # Click -> result: the first run in the server, then warm ones.
                    cold = _click_run(page, server.store)
                    out["click_to_queued_cold_s"] = cold["queued"]
                    out["click_to_first_result_cold_s"] = cold["first"]
                    out["click_to_finished_cold_s"] = cold["done"]
                    out["first_result_measurement_cold_s"] = cold["own"]
                    out["first_result_beyond_measurement_cold_s"] = cold["beyond"]
                    warm = [_click_run(page, server.store) for _ in range(rounds)]
                    for key, name in (("queued", "click_to_queued_warm_s"),
                                      ("first", "click_to_first_result_warm_s"),
                                      ("done", "click_to_finished_warm_s"),
                                      ("own", "first_result_measurement_warm_s"),
                                      ("beyond", "first_result_beyond_measurement_warm_s")):
                        out[name] = summary([w[key] for w in warm if w[key] is not None])

                    # Widget response, idle and while a long compile runs in the worker.
                    out["widget_roundtrip_idle_s"] = summary(
                        [t for _ in range(rounds) for t in _toggle_n(page)])
                    out["plot_update_idle_s"] = summary(
                        [t for _ in range(rounds) for t in _toggle_stage(page)])
                    long_case = re.compile(r"dict N=3000 .*stage (trace|lower|compile)")
                    entry = page.locator(".bk-input-group", has_text="or any N").locator("input")
                    entry.fill("3000")
                    entry.press("Enter")
                    page.evaluate(_STATUS_LOGGER)
                    since = page.evaluate("performance.now()")
                    page.get_by_role("button", name="Run", exact=True).click()
                    _wait_status(page, since, long_case, 600)
                    n_busy, n_skipped = _probe_while_busy(page, _toggle_n, rounds, long_case)
                    p_busy, p_skipped = _probe_while_busy(page, _toggle_stage, rounds, long_case)
                    out["widget_roundtrip_during_compile_s"] = summary(n_busy)
                    out["plot_update_during_compile_s"] = summary(p_busy)
                    out["probes_not_during_compile"] = n_skipped + p_skipped
                    cancel = page.get_by_role("button", name="Cancel", exact=True)
                    if cancel.is_enabled():
                        since = page.evaluate("performance.now()")
                        cancel.click()
                        out["cancel_s"] = _wait_status(page, since,
                                                       re.compile("Run (cancelled|finished)"), 120)

                finally:
                    browser.close()
        except Exception as err:  # noqa: BLE001 - a partial result still says something
            out["errors"].append(f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
        finally:
            server.stop()
    out["cpu_reference_end_s"] = cpu_reference_s()
    out["machine"]["loadavg_end"] = loadavg()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Dashboard timings in a real browser.")
    p.add_argument("--quick", action="store_true", help="fewer rounds and sessions")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results-dashboard.json"))
    args = p.parse_args(argv)
    why = available()
    if why:
        print(f"bench_dashboard: cannot run: {why}", file=sys.stderr)
        return 2
    result = run(args.quick)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
