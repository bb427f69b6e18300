"""The one report layer: a jinja2 template (autoescaped) that every HTML report renders through.

    page = Page(title, kind="simulate", inputs=[("model", "llama3-70b"), ...])
    page.summary = [("step time", "1.23 s"), ...]           # the key numbers, printed
    page.add(Section("Memory", figure=fig, tables=[Table(...)], note="..."))
    write_page(page, path)

Every page has a <title>, a header of the inputs (model, hardware, plan, framework, calibration,
meshcast version), a summary of key numbers, then sections: a titled figure with its table of the
same numbers beside it, or code blocks (plan YAML, launch config) with a copy button. plotly.js is
embedded once, so the file opens offline. Text from users (names, titles) is escaped by the
template; only plotly's own figure HTML is marked safe.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
FIGURE_WIDTH = 1340           # px: a figure on its own row
FIGURE_WIDTH_BESIDE = 860     # px: a figure with its table beside it


def meshcast_version() -> str:
    """The installed meshcast version (the package's __version__ when not installed)."""
    try:
        from importlib.metadata import version
        return version("meshcast")
    except Exception:   # noqa: BLE001 - running from a source tree
        from meshcast import __version__
        return __version__


def pointer(key) -> str:
    """A JSON Pointer (RFC 6901) into the command's --json object: from a dotted string
    ('plans.0.mfu') or a tuple of parts (for parts that hold dots themselves)."""
    parts = key.split(".") if isinstance(key, str) else key
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


@dataclass
class Cell:
    """One table cell: shown text, and the raw number it shows (``data-value``) when numeric.
    ``key`` names the value in the command's --json object (``pointer``): the browser tests hold
    the page to the JSON through it, so ``value`` is always in the JSON's own unit."""
    text: str
    value: float | None = None
    key: object = ""

    @property
    def pointer(self) -> str:
        return pointer(self.key) if self.key else ""


@dataclass
class Table:
    """A table of the numbers a figure draws. ``name`` becomes the table's ``data-table`` id."""
    name: str
    columns: list
    rows: list
    caption: str = ""

    def cells(self) -> list:
        """Rows as Cell objects (plain values become text cells; numbers keep their value)."""
        out = []
        for row in self.rows:
            out.append([c if isinstance(c, Cell) else Cell(str(c)) for c in row])
        return out


@dataclass
class Code:
    """A block of text to copy (plan YAML, launch command)."""
    name: str
    title: str
    text: str
    note: str = ""


@dataclass
class Section:
    """A titled part of the page: a figure and/or tables and code blocks, and a note."""
    title: str
    note: str = ""
    figure: object = None
    tables: list = field(default_factory=list)
    code: list = field(default_factory=list)
    html_id: str = ""
    wide: bool = False          # tables under the figure instead of beside it


@dataclass
class Page:
    """One report: its title, the inputs header, the key numbers and the sections."""
    title: str
    kind: str
    inputs: list = field(default_factory=list)
    summary: list = field(default_factory=list)
    verdict: str = ""
    verdict_ok: bool = True
    sections: list = field(default_factory=list)

    def summary_cells(self) -> list:
        """The summary as (label, Cell): items are (label, text[, value[, key]])."""
        out = []
        for item in self.summary:
            label, text = item[0], item[1]
            value = item[2] if len(item) > 2 else None
            key = item[3] if len(item) > 3 else ""
            out.append((label, Cell(text, value, key if value is not None else "")))
        return out

    def add(self, section: Section) -> Section:
        self.sections.append(section)
        return section


def _environment():
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
    return Environment(loader=FileSystemLoader(str(TEMPLATE_DIR)), autoescape=select_autoescape(["html", "j2"]),
                       undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def figure_html(fig, first: bool, div_id: str) -> str:
    """A plotly figure as a <div> (plotly.js inlined with the first figure only)."""
    return fig.to_html(full_html=False, include_plotlyjs=bool(first), div_id=div_id,
                       config={"displaylogo": False})


def render_page(page: Page) -> str:
    """The page as one self-contained HTML string."""
    from markupsafe import Markup
    env = _environment()
    figures, first = [], True
    for i, s in enumerate(page.sections):
        s.html_id = s.html_id or f"section-{i}"
        if s.figure is not None:
            beside = bool(s.tables) and not s.wide
            if s.figure.layout.width is None:       # fixed widths: the page prints as it shows
                s.figure.update_layout(width=FIGURE_WIDTH_BESIDE if beside else FIGURE_WIDTH)
            figures.append(Markup(figure_html(s.figure, first, f"fig-{s.html_id}")))
            first = False
        else:
            figures.append(None)
    inputs = list(page.inputs) + [("meshcast", meshcast_version())]
    return env.get_template("report.html.j2").render(page=page, inputs=inputs, figures=figures)


def write_page(page: Page, path) -> None:
    """Render and write atomically."""
    from hardware_specs.fileio import write_text_atomic
    write_text_atomic(path, render_page(page), "output")


def num(v, fmt: str, key: object = "", suffix: str = "", div: float = 1.0) -> Cell:
    """A numeric cell: ``format(v / div, fmt) + suffix`` shown, ``v`` itself kept in ``data-value``."""
    if v is None:
        return Cell("-", None, key)
    return Cell(format(v / div if div != 1.0 else v, fmt) + suffix, float(v), key)
