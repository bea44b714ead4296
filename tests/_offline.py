"""Open a saved page in Debian's chromium with the network cut off, and say what it asked for.

Every request that is not for a local file is recorded and refused (as an air-gapped classroom
machine would), so a handout that still names a CDN shows up here whatever is cached.
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def open_offline(path: Path, screenshot: Path | None = None, wait_ms: int = 3000,
                 browser=None) -> tuple[list[str], int, list[str]]:
    """(addresses asked of the network, Bokeh figures drawn, console errors) of ``path``, in
    ``browser`` (a Playwright browser; by default a chromium started here)."""
    if browser is not None:
        return _visit(browser, path, screenshot, wait_ms)
    # In a thread of its own: pytest-playwright's session browser (the browser tests, when
    # the same test process ran them first) keeps Playwright's event loop running on this
    # thread, and a second sync_playwright() there refuses to start ("Sync API inside the
    # asyncio loop"), as it did in CI.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_open_in_own_chromium, path, screenshot, wait_ms).result()


def _open_in_own_chromium(path: Path, screenshot: Path | None,
                          wait_ms: int) -> tuple[list[str], int, list[str]]:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - a test dependency

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        try:
            return _visit(browser, path, screenshot, wait_ms)
        finally:
            browser.close()


def _visit(browser, path: Path, screenshot: Path | None,
           wait_ms: int) -> tuple[list[str], int, list[str]]:
    asked: list[str] = []
    errors: list[str] = []

    def route(request_route) -> None:
        url = request_route.request.url
        if url.startswith(("file:///", "data:")):
            request_route.continue_()
        else:
            asked.append(url)
            request_route.abort()

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        context.set_offline(True)
        context.route("**/*", route)
        page = context.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("requestfailed", lambda r: asked.append(r.url) if r.url not in asked
                and not r.url.startswith("data:") else None)
        page.goto(path.resolve().as_uri())
        page.wait_for_timeout(wait_ms)
        figures = page.locator(".bk-Figure").count()
        if screenshot is not None:
            page.screenshot(path=str(screenshot), full_page=False)
    finally:
        context.close()
    return asked, figures, errors
