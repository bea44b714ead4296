"""Shared test setup: Debian's chromium for pytest-playwright, and a served dashboard.

Browser tests (``@pytest.mark.browser``) drive ``/usr/bin/chromium`` (Playwright's own browser
download cannot work here). Without chromium they are skipped locally; under ``CI=true`` a skipped
browser test is reported as a failure, so a CI run can never pass without the browser tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from _support import CPU_ENV
from _support import free_port as _free_port
from _support import page_error_text

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
APP = ROOT / "apps" / "explorer_app.py"
SERVER_START_S = 120
# How long a browser test's ``expect(...)`` waits for the page to show something (Playwright's
# default is 5 s). These tests check what the page shows, not how fast: on two cores busy with
# the other test process's notebook, a served page was seen taking 4-5 s to start a session,
# and an alert more than 10 s to come. Timings are ``benchmarks/bench_dashboard.py``'s job.
EXPECT_TIMEOUT_MS = 30_000

with contextlib.suppress(ImportError):  # playwright is a test dependency; be safe without it
    from playwright.sync_api import expect as _expect

    _expect.set_options(timeout=EXPECT_TIMEOUT_MS)


def pytest_configure(config):
    """A shell starts a background job without job control (``(pytest &)``, a script's ``&``)
    with SIGINT ignored, and an ignored signal stays ignored across ``exec``: every CLI, watch
    and worker process a test starts would then shrug off the Ctrl-C that the interrupt tests
    send it (six failures that are not the explorer's). A terminal's Ctrl-C reaches a process
    whose SIGINT is not ignored; the test processes, and so what they start, get that."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def executor():
    """One measuring worker (CPU backend) shared by the tests that need one; a test that kills
    it gets a fresh one for the next job, as users do."""
    from explorer import WorkerExecutor  # noqa: PLC0415

    ex = WorkerExecutor(timeout=300, env=dict(CPU_ENV))
    yield ex
    ex.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(autouse=True)
def _own_problem_registry():
    """Each test sees the built-in problems and those it defines itself: a problem another
    test module defined (at import, say) does not leak into its menus and messages."""
    from explorer.testing import isolated_problems  # noqa: PLC0415

    with isolated_problems():
        yield


@pytest.fixture(autouse=True)
def _private_default_store(tmp_path, monkeypatch):
    """No test may touch the user's default results store."""
    monkeypatch.setenv("PYTREE_EXPLORER_DB", str(tmp_path / "default-store.sqlite"))


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """pytest-playwright's launch arguments, pointed at the system chromium."""
    return {
        **browser_type_launch_args,
        "executable_path": _chromium(),
        "args": ["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
    }


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1600, "height": 2200}}


def pytest_collection_modifyitems(items):
    """Modules with browser or notebook tests first (they take most of the suite's time), the
    rest after, each module's tests together and in their own order: with ``-n 2 --dist
    loadscope --no-loadscope-reorder`` (as ``.ci/run`` runs) the two test processes start on
    the long modules and share the short ones, instead of one ending alone on a long module."""
    heavy = {item.module.__name__ for item in items
             if item.get_closest_marker("browser") or item.get_closest_marker("notebook")}
    items.sort(key=lambda item: item.module.__name__ not in heavy)  # stable: order kept


def pytest_runtest_setup(item):
    if item.get_closest_marker("browser") is None:
        return
    if _chromium() is None:
        pytest.skip("chromium is not installed "
                    "(apt-get install -y --no-install-recommends chromium)")
    try:
        import playwright  # noqa: F401, PLC0415
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[test]')")


_PAGE_LOG = pytest.StashKey[list]()
_PAGE = pytest.StashKey[object]()


@pytest.fixture(autouse=True)
def _page_log(request):
    """What a browser test's page said while it ran (JavaScript errors with their first stack
    frames, a crash, its websockets closing), shown with the test's report when it fails: two
    failures under the full suite's load said only that a tab's contents never came."""
    if request.node.get_closest_marker("browser") is None or "page" not in request.fixturenames:
        yield
        return
    page = request.getfixturevalue("page")
    log: list[str] = request.node.stash.setdefault(_PAGE_LOG, [])

    def stamp(text: str) -> None:
        log.append(f"{time.strftime('%H:%M:%S')} {text}")

    page.on("console", lambda m: stamp(f"console.{m.type}: {m.text}")
            if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda err: stamp("pageerror: " + page_error_text(err)))
    page.on("crash", lambda _: stamp("the page crashed"))
    page.on("websocket", lambda ws: ws.on("close", lambda w: stamp(f"websocket closed: {w.url}")))
    request.node.stash[_PAGE] = page
    yield


# Every glyph colour on the page that is not a colour: BokehJS's "n is not iterable" (seen in 1
# of 5 to 13 runs of two browser tests under load, the page's later updates never drawn) is its
# colour parser meeting a scalar colour value that is neither a string, an integer nor a list.
_ODD_COLOURS_JS = """() => {
    const odd = [];
    const fine = v => v === null || v === undefined || typeof v === 'string'
                      || Number.isInteger(v) || Array.isArray(v);
    const show = v => (ArrayBuffer.isView(v) ? `${v.constructor.name}[${v.length}] `
                       + JSON.stringify(Array.from(v.slice(0, 4))) : JSON.stringify(v));
    for (const doc of Bokeh.documents) {
        for (const m of doc.all_models) {
            if (m.glyph === undefined || m.data_source === undefined) continue;
            const plot = [...doc.all_models].find(p => Array.isArray(p.renderers)
                                                      && p.renderers.includes(m));
            const where = `renderer ${m.id} of "${plot && plot.title ? plot.title.text : '?'}"`;
            for (const g of [m.glyph, m.hover_glyph, m.muted_glyph, m.selection_glyph,
                             m.nonselection_glyph]) {
                if (!g || typeof g !== 'object' || !g.properties) continue;
                for (const [name, prop] of Object.entries(g.properties)) {
                    if (!name.endsWith('color')) continue;
                    const spec = prop.get_value();
                    if (spec && typeof spec === 'object' && 'value' in spec) {
                        if (!fine(spec.value)) odd.push(`odd colour: ${g.type}.${name} = `
                                                        + `${show(spec.value)} (${where})`);
                    } else if (spec && typeof spec === 'object' && 'field' in spec
                               && !spec.transform) {
                        // A colour read from a column: each of its values must be a colour.
                        const data = m.data_source.data || {};
                        const column = data instanceof Map ? data.get(spec.field)
                                                           : data[spec.field];
                        const values = column == null ? [] : Array.from(column);
                        const bad = values.find(v => !fine(v));
                        if (column == null || bad !== undefined) {
                            const columns = (data instanceof Map ? [...data.entries()]
                                             : Object.entries(data))
                                .map(([k, c]) => `${k}: ${show(c)}`).join('; ');
                            odd.push(`odd colour: ${g.type}.${name} = field "${spec.field}", `
                                     + `column ${show(column)} (${where}; columns ${columns})`);
                        }
                    }
                }
            }
        }
    }
    return odd.length ? odd : ['every glyph colour is a colour'];
}"""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    log = item.stash.get(_PAGE_LOG, None)
    if report.failed and log:
        if report.when == "call" and any(" pageerror: " in line for line in log):
            # Bounded: ``evaluate`` has no timeout, and a page stuck in its errors once held
            # it (and the whole run) until pytest-timeout's 600 s; a page that crashed, closed
            # or does not answer in 10 s gives nothing.
            with contextlib.suppress(Exception):
                log.extend(item.stash[_PAGE].wait_for_function(
                    _ODD_COLOURS_JS, timeout=10_000).json_value())
        report.sections.append(("what the page said", "\n".join(log)))
    if report.skipped and _in_ci() and item.get_closest_marker("browser") is not None:
        report.outcome = "failed"
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"browser test skipped under CI=true, which counts as a failure: {reason}"


@dataclasses.dataclass(frozen=True)
class Served:
    """A running ``panel serve`` of the explorer: its page URL, port, store file, process and
    log file."""

    url: str
    port: int
    db: Path
    proc: subprocess.Popen
    log: Path


def serve_command(port: int) -> list[str]:
    """The arguments after ``panel`` of the way the tests serve the app."""
    return ["serve", str(APP), "--address", "127.0.0.1", "--port", str(port),
            "--allow-websocket-origin", f"127.0.0.1:{port}"]


@contextlib.contextmanager
def serve(tmp: Path, port: int, args: list[str], log_name: str = "panel-serve.log"):
    """Run ``python -m panel <args>`` (from the repository root, with its store in ``tmp``)
    until the page answers; yield a :class:`Served`; stop the server and its worker after, and
    copy its log to ``test-artifacts/<log_name>``."""
    db = tmp / "results.sqlite"
    env = {**os.environ, "PYTREE_EXPLORER_DB": str(db)}
    log_path = tmp / "panel.log"
    log = open(log_path, "w+")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "panel", *args],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/{APP.stem}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"panel serve exited with {proc.returncode}:\n{log.read()}")
            try:
                with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - local
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("panel serve did not answer in time")
            time.sleep(0.3)
        yield Served(url=url, port=port, db=db, proc=proc, log=log_path)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the server and its measuring worker
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=20)
        log.seek(0)
        text = log.read()
        log.close()
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / log_name).write_text(text)


@pytest.fixture(scope="module")
def served_app(tmp_path_factory):
    """``panel serve apps/explorer_app.py`` on 127.0.0.1 with an empty results store.

    Yields the page URL. The first request renders the app once, so the server has imported
    everything before a test's clock starts.
    """
    port = _free_port()
    with serve(tmp_path_factory.mktemp("served"), port, serve_command(port)) as server:
        yield server.url


@pytest.fixture(scope="module")
def served_explorer(tmp_path_factory, request):
    """Like ``served_app``, but yields the whole :class:`Served` (store file, process, log),
    for tests that look behind the page. Its log goes to
    ``test-artifacts/panel-serve-<test module>.log``."""
    port = _free_port()
    name = f"panel-serve-{request.module.__name__.rsplit('.', 1)[-1]}.log"
    with serve(tmp_path_factory.mktemp("served"), port, serve_command(port), name) as server:
        yield server


@pytest.fixture
def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return _free_port()


@pytest.fixture
def panel_server(tmp_path):
    """``panel_server(port, args, log_name)``: a context manager that runs
    ``python -m panel <args>`` from the repository root with an empty store in ``tmp_path``
    (see :func:`serve`), for tests that must start the server their own way."""
    return lambda port, args, log_name="panel-serve-custom.log": serve(tmp_path, port, args,
                                                                       log_name)
