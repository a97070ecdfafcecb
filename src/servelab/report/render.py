"""A report as one self-contained HTML file (styles inline, plots as data: URIs, no script, nothing fetched) or
as Markdown for an issue or a post (tables and verdicts; plots named, not embedded)."""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime

from servelab._version import __version__
from servelab.report.model import Section, Table

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; color: #1b1b1b; padding: 0 1rem; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2.5rem; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.8rem 0 1.5rem; font-size: 0.85rem; }
caption { text-align: left; font-weight: 600; padding: 0.3rem 0; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: right; }
th:first-child, td:first-child { text-align: left; } th { background: #f2f2f2; }
figure { margin: 1rem 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
.verdicts li { margin: 0.2rem 0; } .problems { color: #8a1c1c; }
details { margin: 0.5rem 0 1rem; } pre { background: #f7f7f7; padding: 0.6rem; overflow-x: auto; font-size: 0.75rem; }
"""


def _lines(text: str) -> str:
    return "<br>".join(html.escape(line) for line in text.split("\n"))


def _table_html(t: Table) -> str:
    head = "".join(f"<th>{_lines(h)}</th>" for h in t.headers)
    body = "".join("<tr>" + "".join(f"<td>{_lines(c)}</td>" for c in row) + "</tr>" for row in t.rows)
    note = f'<p class="note">{html.escape(t.note)}</p>' if t.note else ""
    return f'<table class="figures"><caption>{html.escape(t.caption)}</caption><tr>{head}</tr>{body}</table>{note}'


def _section_html(s: Section) -> str:
    parts = [f'<section id="run-{html.escape(s.run_id)}"><h2>{html.escape(s.title)} ({html.escape(s.status)})</h2>']
    if s.facts:
        rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in s.facts)
        parts.append(f'<table class="facts">{rows}</table>')
    if s.verdicts:
        items = "".join(f"<li>{html.escape(v)}</li>" for v in s.verdicts)
        parts.append(f'<ul class="verdicts">{items}</ul>')
    if s.problems:
        items = "".join(f"<li>{html.escape(p)}</li>" for p in s.problems)
        parts.append(f'<ul class="problems">{items}</ul>')
    parts += [_table_html(t) for t in s.tables]
    for p in s.plots:
        data = base64.b64encode(p.png).decode()
        cap = html.escape(p.caption)
        img = f'<img class="plot" alt="{cap}" src="data:image/png;base64,{data}">'
        parts.append(f"<figure>{img}<figcaption>{cap}</figcaption></figure>")
    manifest = html.escape(json.dumps(s.manifest, indent=1, default=str))
    parts.append(f"<details><summary>Manifest: versions, flags, hardware</summary><pre>{manifest}</pre></details>")
    parts.append("</section>")
    return "\n".join(parts)


def to_html(sections: Sequence[Section], title: str = "servelab report", notes: Sequence[str] = ()) -> str:
    """``notes``: what the caller knows failed besides the runs (a step that left no run, say)."""
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    verdicts = [f"{s.kind}: {v}" for s in sections for v in s.verdicts]
    problems = [*notes, *(f"{s.kind} {s.run_id}: {p}" for s in sections for p in s.problems if _failing(s, p))]
    top = "".join(f"<li>{html.escape(v)}</li>" for v in verdicts) or "<li>no verdicts</li>"
    failed = "".join(f"<li>{html.escape(p)}</li>" for p in problems)
    body = "\n".join(_section_html(s) for s in sections)
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p>servelab {__version__}, made {made}, {len(sections)} run(s).</p>"
        f'<h2>Verdicts</h2><ul class="verdicts">{top}</ul>'
        + (f'<h2>What failed</h2><ul class="problems">{failed}</ul>' if failed else "")
        + f"{body}</body></html>"
    )


def _failing(s: Section, problem: str) -> bool:
    """Problems worth the top of the report: a run that did not complete, or requests that failed."""
    return s.status != "complete" or "failed" in problem or "stopped early" in problem


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~$&])")
_SHORTCODE = re.compile(r"(?::[a-z0-9_+-]+:)+")  # emoji codes as GitHub reads one, those side by side as one


def md_escape(text: str) -> str:
    """User and server text as literal Markdown: its punctuation backslash-escaped, and a ``:shortcode:`` (which
    GitHub turns into an emoji, escaped or not) set in a code span, where nothing is read."""
    out, last = [], 0
    for m in _SHORTCODE.finditer(text):
        out += [_MD_SPECIAL.sub(r"\\\1", text[last : m.start()]), f"`{m.group()}`"]
        last = m.end()
    return "".join([*out, _MD_SPECIAL.sub(r"\\\1", text[last:])])


def _table_md(t: Table) -> str:
    def cell(c: str) -> str:
        return "<br>".join(md_escape(line) for line in c.split("\n"))

    lines = [f"**{md_escape(t.caption)}**", "", "| " + " | ".join(cell(h) for h in t.headers) + " |"]
    lines.append("|" + "---|" * len(t.headers))
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in t.rows]
    return "\n".join(lines + (["", f"*{md_escape(t.note)}*"] if t.note else []))


def to_markdown(sections: Sequence[Section], title: str = "servelab report", notes: Sequence[str] = ()) -> str:
    """Every piece of text from a run (names, a server's words, a model's reply) goes through :func:`md_escape`."""
    out = [f"# {md_escape(title)}", ""] + [f"- **failed:** {md_escape(n)}" for n in notes] + ([""] if notes else [])
    for s in sections:
        out += [f"## {md_escape(s.title)} ({md_escape(s.status)})", ""]
        out += [f"- {md_escape(k)}: {md_escape(v)}" for k, v in s.facts] + ([""] if s.facts else [])
        out += [f"- {md_escape(v)}" for v in s.verdicts] + ([""] if s.verdicts else [])
        out += [f"- **problem:** {md_escape(p)}" for p in s.problems] + ([""] if s.problems else [])
        for t in s.tables:
            out += [_table_md(t), ""]
        out += [f"*(plot in the HTML report: {md_escape(p.caption)})*" for p in s.plots] + [""]
    return "\n".join(out)
