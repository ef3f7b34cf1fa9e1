"""``rankvisor serve`` in a real browser: Debian's Chromium, driven by Playwright.

The door's own checks are tested with aiohttp (``test_serve_door``); this one loads the page
as a person does, in headless Chromium with a fresh profile: without the token the page is
refused (403), with it the terminal draws the grid, keys typed into the page reach the app
(``?`` opens the help, ``escape`` closes it), and what the page shows is read back from the
terminal's rows. The browser is ``/usr/bin/chromium`` (``apt-get install chromium``; .ci/run
installs it when missing) and Playwright only drives it (``playwright install`` is never
run): without either the test is skipped, saying which is missing.

The page keeps its xterm.js terminal in a local of its script; an init script catches it
as the page's script stores it (``this.terminal = ...``), so that the rows' text can be read
(the terminal draws on a canvas: its rows are not in the DOM).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.reliability.test_serve_door import BOUND, Served, serve  # noqa: F401

pytestmark = pytest.mark.processes

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]

CATCH_TERMINAL = """
Object.defineProperty(Object.prototype, "terminal", {
  configurable: true,
  set(value) {
    if (value && value.buffer && !window.__rankvisorTerminal) window.__rankvisorTerminal = value;
    Object.defineProperty(this, "terminal", {value, writable: true, configurable: true,
                                             enumerable: true});
  },
});
"""
"""Keep the page's terminal where the test can read it (see the module docstring)."""

SCREEN = """() => {
  const t = window.__rankvisorTerminal;
  if (!t) return "";
  const b = t.buffer.active, rows = [];
  for (let y = 0; y < t.rows; y++) {
    const line = b.getLine(b.viewportY + y);
    rows.push(line ? line.translateToString(true) : "");
  }
  return rows.join("\\n");
}"""
"""The terminal's rows as text, top to bottom."""


def _playwright() -> Any:
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        pytest.skip("no Chromium at /usr/bin/chromium (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    return sync_playwright


def test_the_served_app_renders_in_chromium_takes_keys_and_refuses_without_the_token(
    serve: Callable[..., Served], tmp_path: Path  # noqa: F811
) -> None:
    sync_playwright = _playwright()
    served = serve()
    url = served.url
    with sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=shutil.which("chromium") or CHROMIUM,
            headless=True, args=FLAGS, viewport={"width": 1280, "height": 800},
        )
        try:
            page = browser.new_page()
            refused = page.goto(served.origin + "/")
            assert refused is not None and refused.status == 403
            page.add_init_script(CATCH_TERMINAL)
            asked = time.monotonic()
            page.goto(url)

            def screen() -> str:
                return str(page.evaluate(SCREEN))

            def shows(*words: str) -> None:
                deadline = time.monotonic() + 2 * BOUND
                while not all(w in (text := screen()) for w in words):
                    assert time.monotonic() < deadline, f"never showed {words}:\n{text}"
                    page.wait_for_timeout(100)

            shows("rank 0", "? Help", "q Quit")  # the grid and its footer
            rendered = time.monotonic() - asked
            page.locator(".xterm-screen").click()
            page.keyboard.press("?")
            shows("keys", "SIGTERM", "escape close")  # the help screen lists the keys
            page.keyboard.press("Escape")
            deadline = time.monotonic() + BOUND
            while "SIGTERM" in screen():
                assert time.monotonic() < deadline, screen()
                page.wait_for_timeout(100)
            assert "rank 0" in screen()
            print(f"browser: first frame of the grid {rendered:.1f} s after the page was asked")
        finally:
            browser.close()
