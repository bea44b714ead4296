"""Memory a served page leaves behind: the server's resident memory over many page loads.

    python benchmarks/bench_page_memory.py [--pages 200] [--warmup 10] [--out FILE]

Serves ``apps/explorer_app.py`` with ``panel serve`` on 127.0.0.1 (a throw-away results store;
sessions without a browser end after ``--session-lifetime-ms``), then opens ``--pages`` pages one
after another in Debian's chromium, each in a fresh browser context closed once the page has
drawn (the Run button, the four plots and the results table). After a warm-up (the first pages
fill the server's caches: imports, the example sweep, the plot cache), it reads the server's
resident memory (``/proc/PID/status``, VmRSS) once every session has ended and reports the growth
per page, from a straight line fitted through the readings taken every ``--every`` pages (each
after the sessions opened so far have ended). Goal: at most 0.1 MiB per page; a page that
leaves its session's objects behind (its document, plots, watchers) grows it by about 1.7 MiB.
Only 127.0.0.1 is ever asked for anything; the loop is bounded by ``--pages`` (at most 1000).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from common import host_info, loadavg  # noqa: E402

ROOT = HERE.parent
APP = ROOT / "apps" / "explorer_app.py"
CHROMIUM = "/usr/bin/chromium"
GOAL_MIB_PER_PAGE = 0.1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` over ``xs``."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0


def run(pages: int, warmup: int, every: int, lifetime_ms: int, app: Path = APP) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    out: dict[str, Any] = {"pages": pages, "warmup": warmup, "every": every, "app": app.name,
                           "machine": host_info(), "errors": []}
    port = _free_port()
    url = f"http://127.0.0.1:{port}/{app.stem}"
    settle_s = 2 * lifetime_ms / 1000 + 2  # a closed page's session has ended by then
    with tempfile.TemporaryDirectory(prefix="bench-page-memory-") as tmp:
        env = {**os.environ, "PYTREE_EXPLORER_DB": str(Path(tmp) / "results.sqlite"),
               "JAX_PLATFORMS": "cpu"}
        log = (Path(tmp) / "server.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "panel", "serve", str(app), "--port", str(port),
             "--address", "127.0.0.1", "--allow-websocket-origin", f"127.0.0.1:{port}",
             "--unused-session-lifetime", str(lifetime_ms),
             "--check-unused-sessions", str(max(lifetime_ms // 2, 500))],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 180
            while True:
                try:
                    with urllib.request.urlopen(url, timeout=60) as response:
                        response.read()
                    break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError("panel serve did not answer") from None
                    time.sleep(0.2)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM,
                                             args=["--no-sandbox", "--disable-gpu"])
                try:
                    readings: list[tuple[int, float]] = []
                    for i in range(1, warmup + pages + 1):
                        context = browser.new_context(viewport={"width": 1280, "height": 800})
                        page = context.new_page()
                        page.goto(url, timeout=180_000)
                        page.get_by_role("button", name="Run", exact=True).wait_for(
                            timeout=180_000)
                        page.locator(".bk-Canvas").nth(3).wait_for(timeout=180_000)
                        page.locator(".tabulator-row").first.wait_for(timeout=180_000)
                        context.close()
                        done = i - warmup
                        if done >= 0 and (done % every == 0 or done == pages):
                            time.sleep(settle_s)
                            readings.append((done, _rss_mib(proc.pid)))
                            print(f"after {done} pages: {readings[-1][1]:.1f} MiB", flush=True)
                finally:
                    browser.close()
            xs, ys = [float(x) for x, _ in readings], [y for _, y in readings]
            out["rss_mib_by_pages"] = readings
            out["growth_mib_per_page"] = slope(xs, ys)
            out["growth_mib_total"] = ys[-1] - ys[0]
            out["goal_mib_per_page"] = GOAL_MIB_PER_PAGE
            out["met"] = out["growth_mib_per_page"] <= GOAL_MIB_PER_PAGE
        except Exception as err:  # noqa: BLE001 - a partial result still says something
            out["errors"].append(f"{type(err).__name__}: {err}".splitlines()[0])
        finally:
            os.killpg(proc.pid, 15)  # the server and its measurement worker
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
            log.close()
    out["machine"]["loadavg_end"] = loadavg()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Server memory per page load.")
    p.add_argument("--pages", type=int, default=200, help="pages measured (1 to 1000)")
    p.add_argument("--warmup", type=int, default=10, help="pages loaded before the first reading")
    p.add_argument("--every", type=int, default=20, help="pages between two readings")
    p.add_argument("--session-lifetime-ms", type=int, default=3000,
                   help="how soon the server ends a session whose page has closed")
    p.add_argument("--app", default=str(APP), help="the app served (default: the explorer)")
    p.add_argument("--out", default=str(HERE / "bench_page_memory.json"))
    args = p.parse_args(argv)
    if not 1 <= args.pages <= 1000 or args.warmup < 0 or args.every < 1:
        print("bench_page_memory: --pages must be 1 to 1000, --warmup >= 0, --every >= 1",
              file=sys.stderr)
        return 2
    if not Path(CHROMIUM).exists():
        print(f"bench_page_memory: cannot run: no chromium at {CHROMIUM}", file=sys.stderr)
        return 2
    result = run(args.pages, args.warmup, args.every, args.session_lifetime_ms, Path(args.app))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: result.get(k) for k in ("growth_mib_per_page", "growth_mib_total",
                                                 "met", "errors")}, indent=1))
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
