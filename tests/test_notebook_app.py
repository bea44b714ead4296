"""``panel serve notebooks/03_remedies.ipynb`` works as an app (no browser needed here).

The notebook skips its measuring cells when served (``pn.state.served``), so the page must come
back quickly, as an HTML page carrying Bokeh/Panel and the dashboard.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "03_remedies.ipynb"
START_TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - local server
        return response.status, response.read().decode("utf-8", "replace")


@pytest.fixture
def served_notebook(tmp_path):
    try:
        import nbconvert  # noqa: F401, PLC0415
    except ImportError:
        pytest.fail("`panel serve` on a notebook needs nbconvert: it must be installed with the "
                    "package (pip install -e '.[test]')")
    port = _free_port()
    env = {**os.environ, "PYTREE_EXPLORER_DB": str(tmp_path / "results.sqlite")}
    log = open(tmp_path / "panel.log", "w+")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "panel", "serve", str(NOTEBOOK), "--address", "127.0.0.1",
         "--port", str(port), "--allow-websocket-origin", f"127.0.0.1:{port}"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield f"http://127.0.0.1:{port}/{NOTEBOOK.stem}", proc, log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)   # the server and its measuring worker, if any
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=20)
        log.close()


def _log(log) -> str:
    log.flush()
    log.seek(0)
    return log.read()[-4000:]


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_remedies_notebook_serves_as_an_app(served_notebook):
    url, proc, log = served_notebook
    deadline = time.monotonic() + START_TIMEOUT_S
    status, page, last_error = None, "", None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"panel serve exited with {proc.returncode}:\n{_log(log)}")
        try:
            status, page = _get(url, timeout=60)
            break
        except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
            last_error = err
            time.sleep(0.5)
    else:
        pytest.fail(f"no answer from {url} in {START_TIMEOUT_S} s ({last_error}):\n{_log(log)}")

    assert status == 200
    assert "Bokeh" in page and "bokeh" in page.lower()
    assert "panel" in page.lower()
    # The dashboard itself, not an error page or the notebook's cell outputs.
    assert "PyTree Compile Explorer" in page
    assert "Traceback" not in page and "Exception" not in _log(log), _log(log)
