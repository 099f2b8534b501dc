"""Builds the documentation site and saves headless-browser screenshots of its home page and one
API page, for a reviewer to look at without serving the site.

    python scripts/screenshot_docs.py [--out site-screenshots] [--browser chromium]

Needs the `[docs]` extra and a Chromium (Debian: `apt-get install -y chromium`). The site is
built into a temporary folder, served on 127.0.0.1 (so it renders as `mkdocs serve` shows it)
and each page is captured at 1280 px wide; the PNGs' paths are printed.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = {"home": "", "api-episode": "reference/api/episode/"}


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


def build(site: pathlib.Path) -> None:
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                    "--site-dir", str(site)], cwd=ROOT, check=True)


def find_browser(name: str | None) -> str:
    for candidate in ([name] if name else ["chromium", "chromium-browser", "google-chrome"]):
        path = shutil.which(candidate)
        if path:
            return path
    raise SystemExit("no Chromium found: apt-get install -y chromium (or pass --browser)")


def screenshot(browser: str, url: str, out: pathlib.Path, height: int) -> None:
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", f"--window-size=1280,{height}",
                    f"--screenshot={out}", url], check=True, capture_output=True, timeout=120)
    if not out.is_file() or out.stat().st_size == 0:
        raise SystemExit(f"{browser} wrote no screenshot of {url}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "site-screenshots"),
                        help="folder for the PNGs (default: site-screenshots/)")
    parser.add_argument("--browser", default=None, help="Chromium binary (default: found)")
    parser.add_argument("--height", type=int, default=1400, help="window height in px")
    parser.add_argument("--page", action="append", default=[], metavar="NAME=PATH",
                        help="another page to capture, e.g. quickstart=tutorials/01_quickstart/")
    args = parser.parse_args()
    pages = {**PAGES, **dict(item.split("=", 1) for item in args.page)}
    browser = find_browser(args.browser)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        site = pathlib.Path(tmp) / "site"
        build(site)
        handler = functools.partial(_QuietHandler, directory=str(site))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            for name, path in pages.items():
                png = out / f"{name}.png"
                screenshot(browser, f"http://127.0.0.1:{server.server_port}/{path}", png,
                           args.height)
                print(png)
        finally:
            server.shutdown()
            thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
