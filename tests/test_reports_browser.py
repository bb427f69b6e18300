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
        self.title = ""
        self.keyed: list[dict] = []          # elements with data-key: {key, value, text}
        self.tables: list[str] = []          # data-table names
        self.codes: dict[str, list[str]] = {}   # <pre data-code> text
        self._open_keyed: list[tuple[int, dict]] = []
        self._in_title = False
        self._code: str | None = None

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
        if "data-table" in a:
            self.tables.append(a["data-table"])
        if "data-key" in a:
            item = {"key": a["data-key"], "value": a.get("data-value"), "text": ""}
            self.keyed.append(item)
            self._open_keyed.append((len(self.stack), item))
        self._in_title = tag == "title"
        if tag == "pre" and "data-code" in a:
            self._code = a["data-code"]
            self.codes[self._code] = []
        if tag not in self.VOID:
            self.stack.append((tag, plot))

    def handle_startendtag(self, tag, attrs):
        classes = set((dict(attrs).get("class") or "").split())
        for i in self._open_plots():
            if classes & {"trace", "table"}:
                self.plots[i]["traces"] += 1

    def handle_endtag(self, tag):
        if tag == "pre":
            self._code = None
        self._in_title = False
        for k in range(len(self.stack) - 1, -1, -1):
            if self.stack[k][0] == tag:
                del self.stack[k:]
                self._open_keyed = [(d, it) for d, it in self._open_keyed if d < k]
                return

    def handle_data(self, data):
        self.text.append(data)
        if self._in_title:
            self.title += data
        for _, item in self._open_keyed:
            item["text"] += data
        if self._code is not None:
            self.codes[self._code].append(data)


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


def cli_json(capsys, *argv: str) -> dict:
    """The same command's --json object."""
    capsys.readouterr()
    cli(*argv, "--json")
    return json.loads(capsys.readouterr().out)


def resolve(doc, ptr: str):
    """A JSON Pointer (RFC 6901) into ``doc``."""
    for part in ptr.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def check_numbers_match_json(scan: PlotScan, doc: dict, at_least: int) -> None:
    """Every page element tied to a --json key (data-key) holds that key's value: numbers exactly
    (data-value, in the JSON's unit) and a shown text with a digit; text cells begin with it."""
    assert len(scan.keyed) >= at_least, f"only {len(scan.keyed)} numbers on the page are tied to --json"
    for item in scan.keyed:
        want = resolve(doc, item["key"])
        text = " ".join(item["text"].split())
        if item["value"] is None:
            assert text.startswith(str(want)), f"{item['key']}: page shows {text!r}, --json has {want!r}"
        else:
            got = float(item["value"])
            assert got == pytest.approx(float(want), rel=1e-9, abs=1e-12), f"{item['key']}: {got} vs --json {want}"
            assert re.search(r"\d", text), f"{item['key']}: shows no number ({text!r})"


def plotly_figures(report: Path):
    """(div id, traces, layout) of every Plotly.newPlot call in a report."""
    text, dec = report.read_text(), json.JSONDecoder()
    for m in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*', text):
        traces, end = dec.raw_decode(text, m.end())
        layout, _ = dec.raw_decode(text, re.compile(r",\s*").match(text, end).end())
        yield m.group(1), traces, layout


def check_figures_titled(report: Path) -> None:
    """Every plotly figure has a title and every one of its axes a title (from the figure JSON)."""
    for div, traces, layout in plotly_figures(report):
        title = layout.get("title", {})
        assert (title.get("text") if isinstance(title, dict) else title), f"{report.name} {div}: untitled figure"
        for key, axis in layout.items():
            if re.fullmatch(r"[xy]axis\d*", key):
                t = axis.get("title", {})
                assert (t.get("text") if isinstance(t, dict) else t), f"{report.name} {div}: {key} has no title"


def figure_colors(report: Path) -> dict[str, set]:
    """{trace name: colours} over every figure of a report (marker or line colour)."""
    out: dict[str, set] = {}
    for _, traces, _ in plotly_figures(report):
        for t in traces:
            color = (t.get("marker") or {}).get("color") or (t.get("line") or {}).get("color")
            if t.get("name") and isinstance(color, str):
                out.setdefault(t["name"], set()).add(color.upper())
    return out


SIM = ["--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "1024", "--tp", "8", "--pp", "4", "--vp", "5",
       "--mbs", "1", "--gbs", "1024", "--seq", "8192", "--tokens", "15e12"]
MOE = ["--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "64", "--tp", "1", "--pp", "2", "--ep", "8",
       "--gbs", "64", "--seq", "4096"]
PLAN = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--gbs", "64", "--seq", "4096", "--top", "3"]
VAL = ["--measurements", str(ROOT / "validation" / "measurements" / "h100_kernels.json"),
       "--published", str(ROOT / "validation" / "published" / "published_runs.csv")]
WHATIF = ["--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "1024", "--tp", "8", "--pp", "4", "--mbs", "1",
          "--gbs", "1024", "--seq", "8192", "--sweep", "accelerator=h100-sxm,h200-sxm", "--sweep",
          "gpus=512,1024,2048,4096", "--tokens", "15e12"]
INPUTS = ["model", "hardware", "framework", "calibration", "meshcast"]


def test_simulate_report(tmp_path, capsys):
    """How long is a step, what dominates, does it fit, by how much: printed on the page, equal to --json."""
    out = tmp_path / "simulate.html"
    cli("simulate", *SIM, "-o", str(out))
    doc = cli_json(capsys, "simulate", *SIM)
    scan = check_report(out, tmp_path, 4, INPUTS + ["plan", "A step takes", "Does it fit", "HBM capacity"],
                        shot_height=3300)
    assert scan.title.startswith("meshcast simulate: llama3-70b")
    assert {"inputs", "summary", "breakdown", "memory", "stage_memory", "stages", "roofline", "cost"} <= set(scan.tables)
    check_numbers_match_json(scan, doc, 20)
    page = " ".join(scan.text)
    assert f"{doc['step_time_s']:.3f} s" in page and f"{doc['memory']['headroom_bytes'] / 1e9:.1f} GB" in page
    assert f"{doc['time_breakdown_s'][doc['bottleneck']] / doc['step_time_s']:.0%}" in page
    check_figures_titled(out)
    names = figure_colors(out)
    assert {"TP comm (exposed in pass)", "PP send/recv", "DP comm", "compute-bound", "weights"} <= set(names)
    assert any(n.startswith("memory-bound") for n in names)         # memory-bound kernels are on the roofline


def test_simulate_report_shows_expert_all_to_all_on_the_timeline(tmp_path, capsys):
    out = tmp_path / "moe.html"
    cli("simulate", *MOE, "-o", str(out))
    doc = cli_json(capsys, "simulate", *MOE)
    assert doc["time_breakdown_s"].get("ep", 0) > 0
    scan = check_report(out, tmp_path, 4, ["EP all-to-all"])
    check_numbers_match_json(scan, doc, 20)
    assert "EP all-to-all (exposed in pass)" in figure_colors(out)


def test_validate_report(tmp_path, capsys):
    out = tmp_path / "validate.html"
    cli("validate", *VAL, "-o", str(out))
    doc = cli_json(capsys, "validate", *VAL)
    scan = check_report(out, tmp_path, 3, ["h100_kernels.json", "Accuracy per kind", "plain roofline MAPE",
                                           "Published runs", "meshcast"], shot_height=3000)
    assert "h100_kernels.json" in scan.title
    check_numbers_match_json(scan, doc, 6 * len(doc["files"][0]["kinds"]))
    check_figures_titled(out)
    assert "y = x (exact)" in figure_colors(out)


def test_whatif_report(tmp_path, capsys):
    out = tmp_path / "whatif.html"
    cli("whatif", *WHATIF, "-o", str(out))
    doc = cli_json(capsys, "whatif", *WHATIF)
    scan = check_report(out, tmp_path, 5, ["Throughput and MFU", "Roofline", "Cost and time to train", "gpus=4096"]
                        + INPUTS, shot_height=3900)
    assert len(scan.plots) == 5
    check_numbers_match_json(scan, doc, 8 * 5)
    check_figures_titled(out)
    names = figure_colors(out)
    assert "memory-bound (no FLOPs counted)" in names or "memory-bound" in names


def _plan_has_output() -> bool:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    plan = sub.choices.get("plan")
    return plan is not None and any("-o" in a.option_strings for a in plan._actions)


@pytest.mark.skipif(not _plan_has_output(), reason="meshcast plan has no -o/--output HTML report in this version")
def test_plan_report(tmp_path, capsys):
    """The ranked table with band and bottleneck, the Pareto chart, the YAML and a launch command to copy."""
    out, yaml_out = tmp_path / "plan.html", tmp_path / "best.yaml"
    cli("plan", *PLAN, "-o", str(out), "--write-plan", str(yaml_out))
    doc = cli_json(capsys, "plan", *PLAN)
    scan = check_report(out, tmp_path, 1, INPUTS + ["Ranked plans", "80% band", "bottleneck", "Plan YAML",
                                                    "megatron launch config"], shot_height=2300)
    check_numbers_match_json(scan, doc, 6 * len(doc["plans"]))
    check_figures_titled(out)
    launch = "".join(scan.codes["launch"])
    assert "--tensor-model-parallel-size" in launch and "--global-batch-size 64" in launch
    assert "pretrain_gpt.py" in launch and "--num-layers" in launch     # a script that launches, not only degrees
    page_yaml = "".join(scan.codes["plan-yaml"])
    assert page_yaml.split("\nplan:", 1)[1] == yaml_out.read_text().split("\nplan:", 1)[1]


def test_a_category_keeps_its_colour_in_every_report(tmp_path, capsys):
    """Same legend words, same colour, across the simulate, plan, validate and what-if pages; and
    within one report no two categories share a colour."""
    outs = {name: tmp_path / f"{name}.html" for name in ("simulate", "whatif", "validate", "plan")}
    cli("simulate", *SIM, "-o", str(outs["simulate"]))
    cli("whatif", *WHATIF, "-o", str(outs["whatif"]))
    cli("validate", *VAL, "-o", str(outs["validate"]))
    cli("plan", *PLAN, "-o", str(outs["plan"]))
    seen: dict[str, tuple[str, set]] = {}
    for name, path in outs.items():
        colors = figure_colors(path)
        for trace, cs in colors.items():
            assert len(cs) == 1 or trace.startswith("accelerator="), f"{name}: {trace!r} drawn in {cs}"
            if trace in seen:
                assert seen[trace][1] == cs, f"{trace!r}: {seen[trace][1]} in {seen[trace][0]}, {cs} in {name}"
            seen.setdefault(trace, (name, cs))
    shared = {t for t, (n, _) in seen.items() if any(t in figure_colors(p) for m, p in outs.items() if m != n)}
    assert {"compute", "TP comm", "weights", "activations", "roofline"} <= shared
    from simulator.palette import BREAKDOWN, MEMORY, kind_color
    from simulator.palette import KINDS
    assert len(set(BREAKDOWN.values())) == len(BREAKDOWN) and len(set(MEMORY.values())) == len(MEMORY)
    assert len({kind_color(k) for k in KINDS}) == len(KINDS)          # no repeat every five kinds


def test_the_title_is_escaped(tmp_path):
    """User text goes through the template's autoescaping."""
    from simulator.htmlpage import Page, Section, render_page
    page = Page("<script>alert(1)</script> & co", "plan", inputs=[("model", "<b>x</b>")])
    page.add(Section("s", note="<img src=x onerror=alert(1)>"))
    html = render_page(page)
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in html
    assert "<img src=x" not in html and "<b>x</b>" not in html


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
