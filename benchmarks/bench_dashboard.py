"""Dashboard timings, measured in a real browser against ``panel serve``.

    python benchmarks/bench_dashboard.py [--quick] [--out benchmarks/results-dashboard.json]

(``run_benchmarks.py`` runs this too, as its part d.) Drives Debian's chromium with Playwright
against ``panel serve apps/explorer_app.py`` on 127.0.0.1 with a throw-away results store:

* server start -> HTTP ready, and server ready -> first render (a Bokeh plot and the Run button
  on the page);
* click Run -> first result and -> run finished (the default case: decay, N=100, H=200, dict and
  array, loss), first on a fresh server (the page has started the shared worker by then) and
  again warm. The
  page's status line is what the user reads, so that is what we wait for; it is refreshed every
  0.25 s while a case runs, which bounds the resolution of "first result";
* widget response while a long compile runs (dict at N=3000 in the worker) against the same
  interaction when idle, two ways: a widget round trip (pick an N preset until the server has
  copied it into the N entry) and a plot update (change the "Compile time: stage" select until
  the legend text that depends on it shows; the four plots are recomputed on the server);
* memory per additional browser session: the server's resident memory as sessions are opened
  on a fresh server (before any run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "apps" / "explorer_app.py"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
STAGE_TEXT = "Compile stages: dotted"  # the legend note shown only for stage "all stages"


def available() -> str | None:
    """Why the dashboard cannot be benchmarked here, or ``None`` when it can."""
    if not APP.exists() or not (ROOT / "explorer" / "_dashboard.py").exists():
        return "the dashboard (apps/explorer_app.py, explorer/_dashboard.py) does not exist"
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


def _summary(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values) if values else None,
            "spread": [min(values), max(values)] if values else None, "n": len(values)}


class _Server:
    """``panel serve`` in its own session, with a private store; stopped on exit."""

    def __init__(self, workdir: Path):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/{APP.stem}"
        env = {**os.environ, "PYTREE_EXPLORER_DB": str(workdir / "results.sqlite"),
               "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
        self.log = (workdir / "server.log").open("w")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "panel", "serve", str(APP), "--port", str(self.port),
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


def _open(browser: Any, url: str) -> tuple[Any, float]:
    """A new browser session on the page; returns it and seconds until it rendered."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    t0 = time.perf_counter()
    page.goto(url)
    page.locator(".bk-Figure").first.wait_for(timeout=120_000)
    page.get_by_role("button", name="Run", exact=True).wait_for(timeout=120_000)
    return page, time.perf_counter() - t0


# Records every change of the page's status line (found through the shadow roots) with the
# page's clock, every 10 ms, so a state that lasts a moment is not missed.
_STATUS_LOGGER = """() => {
  if (window.__statusLog) return;
  window.__statusLog = [];
  let el = null, last = null;
  const find = () => {
    const stack = [document];
    while (stack.length) {
      const node = stack.pop();
      if (node.shadowRoot) stack.push(node.shadowRoot);
      const kids = node.children || [];
      for (let i = 0; i < kids.length; i++) stack.push(kids[i]);
      if (node.tagName === 'STRONG' && node.textContent.trim() === 'Status:') return node.parentElement;
    }
    return null;
  };
  setInterval(() => {
    if (!el || !el.isConnected) el = find();
    const text = el ? el.textContent : null;
    if (text !== last) { last = text; window.__statusLog.push([performance.now(), text]); }
  }, 10);
}"""


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


def _click_run(page: Any, cases: int, timeout: float = 600) -> tuple[float, float]:
    """Seconds from clicking Run to the first result, and to the run's end, read off the status."""
    page.evaluate(_STATUS_LOGGER)
    first = re.compile(rf"Run (2/{cases}|finished)") if cases > 1 else re.compile("Run finished")
    button = page.get_by_role("button", name="Run", exact=True)
    button.wait_for()
    since = page.evaluate("performance.now()")
    button.click()
    return (_wait_status(page, since, first, timeout),
            _wait_status(page, since, re.compile("Run finished"), timeout))


def _stage_select(page: Any) -> Any:
    return page.locator(".bk-input-group", has_text="Compile time: stage").locator("select")


def _toggle_stage(page: Any) -> list[float]:
    """Plot updates: pick "all stages" until its legend text shows, then "total" until it goes."""
    select, note = _stage_select(page), page.get_by_text(STAGE_TEXT)
    times = []
    for value, visible in (("all stages", True), ("total", False)):
        t0 = time.perf_counter()
        select.select_option(value)
        note.first.wait_for(state="visible" if visible else "detached", timeout=120_000)
        times.append(time.perf_counter() - t0)
    return times


def _toggle_n(page: Any) -> list[float]:
    """Widget round trips: pick an N preset until the server has copied it into the N entry."""
    preset = page.locator(".bk-input-group", has_text="State count N (presets)").locator("select")
    entry = page.locator(".bk-input-group", has_text="or any N").locator("input")
    times = []
    for value in ("30", "10"):
        t0 = time.perf_counter()
        preset.select_option(value)
        deadline = time.monotonic() + 120
        while entry.input_value().replace(",", "") != value:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the N entry never showed {value}")
            time.sleep(0.01)
        times.append(time.perf_counter() - t0)
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
    out: dict[str, Any] = {"rounds": rounds, "sessions": sessions, "errors": []}
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as tmp:
        server = _Server(Path(tmp))
        try:
            out["server_ready_s"] = server.wait_ready()
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    page, first_render = _open(browser, server.url)
                    out["first_render_s"] = first_render

                    # Memory per additional session, on a fresh server (before any run, so the
                    # heap has no freed space for new sessions to reuse unseen).
                    time.sleep(1.0)
                    rss = [_rss_bytes(server.proc.pid)]
                    extra_pages, renders = [], []
                    for _ in range(sessions - 1):
                        extra, seconds = _open(browser, server.url)
                        extra_pages.append(extra)
                        renders.append(seconds)
                        time.sleep(1.0)  # let the session settle
                        rss.append(_rss_bytes(server.proc.pid))
                    steps = [(b - a) for a, b in zip(rss, rss[1:]) if a is not None and b is not None]
                    out["rss_one_session_bytes"] = rss[0]
                    out["rss_by_sessions_bytes"] = rss
                    out["rss_per_session_bytes"] = _summary(steps)
                    out["first_render_additional_sessions_s"] = _summary(renders)
                    for extra in extra_pages:  # their periodic refreshes must not load the server
                        extra.context.close()

                    # Click -> result: the first run in the server, then warm ones.
                    cold_first, cold_done = _click_run(page, cases=2)
                    out["click_to_first_result_cold_s"] = cold_first
                    out["click_to_finished_cold_s"] = cold_done
                    warm_first, warm_done = [], []
                    for _ in range(rounds):
                        a, b = _click_run(page, cases=2)
                        warm_first.append(a)
                        warm_done.append(b)
                    out["click_to_first_result_warm_s"] = _summary(warm_first)
                    out["click_to_finished_warm_s"] = _summary(warm_done)

                    # Widget response, idle and while a long compile runs in the worker.
                    out["widget_roundtrip_idle_s"] = _summary(
                        [t for _ in range(rounds) for t in _toggle_n(page)])
                    out["plot_update_idle_s"] = _summary(
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
                    out["widget_roundtrip_during_compile_s"] = _summary(n_busy)
                    out["plot_update_during_compile_s"] = _summary(p_busy)
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
