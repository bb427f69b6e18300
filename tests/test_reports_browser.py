"""Every HTML report, opened offline in a real headless browser (Debian's chromium, through its
command line: no Python dependency): it renders, every plotly plot is drawn, and the page logs
no error.

How errors are caught: Chromium prints every console message to stderr as ``INFO:CONSOLE``
whatever its level, so the level cannot be read there. The test therefore loads a copy of
each report with a small script first in <head> that records ``console.error`` calls, uncaught
exceptions, failed resource loads (a CDN script would fail offline) and unhandled promise
rejections into an attribute of <html>, which ``--dump-dom`` then shows. As a second net, any
stderr CONSOLE line that reads like an error fails the test too.

``MESHCAST_SCREENSHOTS=docs/screenshots python -m pytest tests/test_reports_browser.py`` also
saves a screenshot of each report (the pictures in docs/whatif.md).
"""
from __future__ import annotations

import html as htmllib
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from meshcast.cli import build_parser, main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not on PATH: install Debian's chromium (apt-get install chromium; "
                             ".ci/run does) to check the HTML reports in a real browser")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--hide-scrollbars", "--mute-audio"]
BUDGET_MS = 15000
ROOT = Path(__file__).resolve().parents[1]

CAPTURE = """<script>/* meshcast browser test: record errors where --dump-dom can see them */
(function () {
  var errs = [];
  function keep(msg) {
    errs.push(String(msg).slice(0, 500));
    document.documentElement.setAttribute("data-meshcast-errors", JSON.stringify(errs));
  }
  var orig = console.error;
  console.error = function () {
    keep("console.error: " + Array.prototype.map.call(arguments, String).join(" "));
    return orig.apply(console, arguments);
  };
  window.addEventListener("error", function (e) {
    if (e.target && e.target !== window && (e.target.src || e.target.href)) {
      keep("failed to load " + (e.target.src || e.target.href));
    } else {
      keep("uncaught: " + (e.message || e.type) + (e.filename ? " at " + e.filename + ":" + e.lineno : ""));
    }
  }, true);
  window.addEventListener("unhandledrejection", function (e) { keep("unhandled rejection: " + e.reason); });
  document.documentElement.setAttribute("data-meshcast-errors", "[]");
})();
</script>"""

ERROR_WORDS = re.compile(r"error|uncaught|failed|exception|refused|not allowed", re.I)


class PlotScan(HTMLParser):
    """Finds each plotly plot div and what is drawn inside it."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, int | None]] = []      # (tag, plot index if this tag opened a plot)
        self.plots: list[dict] = []
        self.errors_attr: str | None = None
        self.text: list[str] = []

    def _open_plots(self):
        return [i for _, i in self.stack if i is not None]

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "html" and "data-meshcast-errors" in a:
            self.errors_attr = a["data-meshcast-errors"]
        classes = set((a.get("class") or "").split())
        plot = None
        if tag == "div" and "js-plotly-plot" in classes:
            plot = len(self.plots)
            self.plots.append({"id": a.get("id"), "main_svg": 0, "traces": 0})
        for i in self._open_plots():
            if tag == "svg" and "main-svg" in classes:
                self.plots[i]["main_svg"] += 1
            if classes & {"trace", "table"} or any(c.startswith("trace") for c in classes):
                self.plots[i]["traces"] += 1
        if tag not in self.VOID:
            self.stack.append((tag, plot))

    def handle_startendtag(self, tag, attrs):
        classes = set((dict(attrs).get("class") or "").split())
        for i in self._open_plots():
            if classes & {"trace", "table"}:
                self.plots[i]["traces"] += 1

    def handle_endtag(self, tag):
        for k in range(len(self.stack) - 1, -1, -1):
            if self.stack[k][0] == tag:
                del self.stack[k:]
                return

    def handle_data(self, data):
        self.text.append(data)


def chromium(tmp_path: Path, *args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def load_in_browser(report: Path, tmp_path: Path) -> tuple[PlotScan, list[str]]:
    """Open a copy of ``report`` with the error recorder; return the scanned DOM and stderr's
    console lines."""
    text = report.read_text()
    m = re.search(r"<head[^>]*>", text, re.I)
    probe = text[:m.end()] + CAPTURE + text[m.end():] if m else CAPTURE + text
    copy = tmp_path / f"probe-{report.name}"
    copy.write_text(probe)
    proc = chromium(tmp_path, "--enable-logging=stderr", "--v=0", f"--virtual-time-budget={BUDGET_MS}",
                    "--dump-dom", copy.as_uri())
    assert proc.returncode == 0, f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}"
    scan = PlotScan()
    scan.feed(proc.stdout)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return scan, console


def check_report(report: Path, tmp_path: Path, min_plots: int, must_show: list[str],
                 shot_height: int = 1800) -> PlotScan:
    text = report.read_text()
    # self-contained: no script, stylesheet or image fetched from elsewhere
    external = re.findall(r"<(?:script|link|img)\b[^>]*(?:src|href)=[\"']?(?:https?:)?//[^>]*>", text, re.I)
    assert not external, f"{report.name} loads from the network: {external[:3]}"
    scan, console = load_in_browser(report, tmp_path)
    assert scan.errors_attr is not None, f"{report.name}: the page did not run its scripts"
    errors = json.loads(htmllib.unescape(scan.errors_attr))
    assert errors == [], f"{report.name}: errors in the page: {errors}"
    bad = [line for line in console if ERROR_WORDS.search(line.split("CONSOLE", 1)[1])]
    assert bad == [], f"{report.name}: console errors: {bad}"
    assert len(scan.plots) >= min_plots, f"{report.name}: {len(scan.plots)} plots, expected {min_plots}"
    for i, p in enumerate(scan.plots):
        assert p["main_svg"] >= 1, f"{report.name}: plot {i} ({p['id']}) has no svg.main-svg: not drawn"
        assert p["traces"] >= 1, f"{report.name}: plot {i} ({p['id']}) drew no trace"
    page_text = " ".join(scan.text)
    for needle in must_show:
        assert needle in page_text, f"{report.name}: {needle!r} not shown"
    shots = os.environ.get("MESHCAST_SCREENSHOTS")
    if shots:
        out = Path(shots)
        out.mkdir(parents=True, exist_ok=True)
        proc = chromium(tmp_path, f"--virtual-time-budget={BUDGET_MS}", f"--screenshot={out / (report.stem + '.png')}",
                        f"--window-size=1400,{shot_height}", report.resolve().as_uri())
        assert proc.returncode == 0
    return scan


def cli(*argv: str) -> None:
    code = main(list(argv))
    assert code == 0, f"meshcast {' '.join(argv)} exited {code}"


def test_simulate_report(tmp_path, capsys):
    out = tmp_path / "simulate.html"
    cli("simulate", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "1024", "--tp", "8", "--pp", "4",
        "--vp", "5", "--mbs", "1", "--gbs", "1024", "--seq", "8192", "-o", str(out))
    capsys.readouterr()
    check_report(out, tmp_path, 1, [])


def test_validate_report(tmp_path, capsys):
    out = tmp_path / "validate.html"
    cli("validate", "--measurements", str(ROOT / "validation" / "measurements" / "h100_kernels.json"), "-o", str(out))
    capsys.readouterr()
    check_report(out, tmp_path, 1, ["Measurements"])


def test_whatif_report(tmp_path, capsys):
    out = tmp_path / "whatif.html"
    cli("whatif", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "1024", "--tp", "8", "--pp", "4",
        "--mbs", "1", "--gbs", "1024", "--seq", "8192", "--sweep", "accelerator=h100-sxm,h200-sxm",
        "--sweep", "gpus=512,1024,2048,4096", "--tokens", "15e12", "-o", str(out))
    capsys.readouterr()
    scan = check_report(out, tmp_path, 5, ["Throughput and MFU", "Roofline", "Cost and time to train", "gpus=4096"],
                        shot_height=3300)
    assert len(scan.plots) == 5


def _plan_has_output() -> bool:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    plan = sub.choices.get("plan")
    return plan is not None and any("-o" in a.option_strings for a in plan._actions)


@pytest.mark.skipif(not _plan_has_output(), reason="meshcast plan has no -o/--output HTML report in this version")
def test_plan_report(tmp_path, capsys):
    out = tmp_path / "plan.html"
    cli("plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--gbs", "64", "--seq", "4096",
        "--top", "3", "-o", str(out))
    capsys.readouterr()
    check_report(out, tmp_path, 1, [])


def test_the_checker_catches_a_broken_page(tmp_path):
    """The checks themselves: a page whose script throws, logs an error and loads from the
    network must fail them."""
    bad = tmp_path / "broken.html"
    bad.write_text("<html><head><title>x</title></head><body><div class='js-plotly-plot'></div>"
                   "<script>console.error('boom'); null.f();</script></body></html>")
    scan, console = load_in_browser(bad, tmp_path)
    errors = json.loads(htmllib.unescape(scan.errors_attr))
    assert any("console.error: boom" in e for e in errors) and any(e.startswith("uncaught") for e in errors)
    assert scan.plots == [{"id": None, "main_svg": 0, "traces": 0}]
    assert any("boom" in line for line in console)
    with pytest.raises(AssertionError):
        check_report(bad, tmp_path, 1, [])
    net = tmp_path / "net.html"
    net.write_text("<html><head><script src='https://cdn.plot.ly/plotly-2.0.0.min.js'></script></head></html>")
    with pytest.raises(AssertionError, match="loads from the network"):
        check_report(net, tmp_path, 0, [])
