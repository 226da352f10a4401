"""Headless Chromium for the page tests: the binary, a run with the network blocked, and
the layout of a page at a given window width.

Loaded through ``load_test_helper("chromium")`` (the ``chromium`` fixture in
tests/conftest.py).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest


def find_chromium() -> str:
    """The chromium binary; skip (or fail in CI, which installs it) when it is absent."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    reason = (
        "chromium not found: install Debian's chromium (apt-get install chromium) to open the page"
    )
    if os.environ.get("CI"):
        pytest.fail(reason + " ($CI is set, so this is an error: .ci/run installs it)")
    pytest.skip(reason)


def headless(chromium: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Chromium with every network request sent to a closed port and every name unresolvable."""
    return subprocess.run(
        [
            chromium,
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--proxy-server=127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


# Measures the page once it has loaded: the viewport width, the document's scroll width,
# the elements that reach past the viewport's right edge, and every image (decoded or not).
_LAYOUT_SCRIPT = """<script>window.addEventListener('load', function () {
  var w = document.documentElement.clientWidth, wide = [];
  document.querySelectorAll('body *').forEach(function (e) {
    if (e.getBoundingClientRect().right > w + 0.5) wide.push(e.tagName + '.' + e.className);
  });
  var images = Array.prototype.map.call(document.images, function (i) {
    return {alt: i.alt, decoded: i.complete && i.naturalWidth > 0,
            right: i.getBoundingClientRect().right};
  });
  document.body.setAttribute('data-layout', JSON.stringify({viewport: w,
    scroll_width: document.documentElement.scrollWidth, wide: wide.slice(0, 20),
    images: images}));
});</script>"""


def layout_at(chromium: str, page: Path, tmp_path: Path, width: int = 1280) -> dict:
    """The layout of ``page`` in a ``width`` px window: ``viewport``, ``scroll_width``,
    ``wide`` (elements past the right edge) and ``images`` (``alt``, ``decoded``, ``right``).

    The page has no script and forbids one: a copy without its Content-Security-Policy,
    with the measuring script added, is what Chromium opens; the layout is the same.
    """
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text())
    probe = tmp_path / f"layout-{page.name}"
    probe.write_text(text.replace("</body>", _LAYOUT_SCRIPT + "</body>"), encoding="utf-8")
    run = headless(
        chromium,
        tmp_path,
        f"--window-size={width},1000",
        "--virtual-time-budget=5000",
        "--dump-dom",
        probe.as_uri(),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    found = re.search(r'data-layout="([^"]*)"', run.stdout)
    assert found, run.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))
