"""A report as one self-contained HTML file (styles inline, plots as data: URIs, no script, nothing fetched) or as
Markdown for an issue or a post (the answer tables and the short verdicts, nothing else).

HTML order: what failed, the answer tables (the first screen), the verdicts (each once, its evidence folded beneath
in a ``<details>``), then each run's section (its evidence tables, plots and manifest), which the verdicts and the
check's steps link to. Every piece of user or server text is escaped."""

from __future__ import annotations

import base64
import html
import json
import re
from datetime import UTC, datetime

from servelab._version import __version__
from servelab.report.document import Report
from servelab.report.model import Section, Table

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1rem auto; max-width: 76rem; color: #1b1b1b; padding: 0 0.8rem; }
h1 { font-size: 1.4rem; margin: 0.3rem 0; }
h2 { font-size: 1.15rem; margin-top: 1.6rem; border-bottom: 1px solid #ccc; }
h3 { font-size: 1rem; margin: 0.8rem 0 0.2rem; } .meta { margin: 0.2rem 0; font-size: 0.85rem; color: #555; }
table { border-collapse: collapse; margin: 0.4rem 0 0.6rem; font-size: 0.85rem; }
caption { text-align: left; font-weight: 600; padding: 0.2rem 0; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.45rem; text-align: right; vertical-align: top; }
th:first-child, td:first-child { text-align: left; } th { background: #f2f2f2; }
td, th, li, summary, p { overflow-wrap: break-word; }
.answers { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 34rem), 1fr)); gap: 0 1.5rem; }
.answers table { width: 100%; } .note { font-size: 0.75rem; color: #555; margin: 0 0 0.6rem; }
.scroll { overflow-x: auto; max-width: 100%; }
.bar { display: flex; height: 1.1rem; border: 1px solid #999; margin: 0.3rem 0; font-size: 0.7rem; }
.bar span { overflow: hidden; white-space: nowrap; padding-left: 2px; color: #fff; }
.bar .p0 { background: #3b6ea8; } .bar .p1 { background: #8c5fa8; } .bar .p2 { background: #2f8f5b; }
.bar .p3 { background: #c07a2c; } .bar .p4 { background: #d8d8d8; color: #333; }
figure { margin: 1rem 0; } figure img { max-width: 100%; height: auto; border: 1px solid #ddd; }
ul.verdicts { margin: 0.2rem 0; padding-left: 1.2rem; } .verdicts li { margin: 0.15rem 0; }
.verdicts details { display: inline; } .evidence { font-size: 0.8rem; color: #444; margin: 0.2rem 0 0.4rem; }
.problems { color: #8a1c1c; }
details { margin: 0.2rem 0; } pre { background: #f7f7f7; padding: 0.6rem; overflow-x: auto; font-size: 0.75rem; }
"""


def _lines(text: str) -> str:
    """Escaped, its lines kept; a URL may break after a slash (in a phone-wide table), a word never."""
    return "<br>".join(_breakable(html.escape(line)) for line in text.split("\n"))


def _breakable(line: str) -> str:
    return line.replace("/", "/<wbr>") if "://" in line else line


def _cell(t: Table, text: str) -> str:
    href = t.anchors.get(text)
    return f'<a href="{html.escape(href)}">{_lines(text)}</a>' if href else _lines(text)


def _bar_html(t: Table) -> str:
    if not t.bar:
        return ""
    parts = "".join(
        f'<span class="p{i % 5}" style="width:{share * 100:.2f}%" title="{html.escape(name)} {share:.0%}">'
        f"{html.escape(name)}</span>"
        for i, (name, share) in enumerate(t.bar)
    )
    return f'<div class="bar" role="img" aria-label="{html.escape(t.caption)}">{parts}</div>'


def _table_html(t: Table) -> str:
    head = "".join(f"<th>{_lines(h)}</th>" for h in t.headers)
    body = "".join("<tr>" + "".join(f"<td>{_cell(t, c)}</td>" for c in row) + "</tr>" for row in t.rows)
    note = f'<p class="note">{html.escape(t.note)}</p>' if t.note else ""
    caption = f"<caption>{html.escape(t.caption)}</caption>"
    table = f'<div class="scroll"><table class="figures">{caption}<tr>{head}</tr>{body}</table></div>'
    return f"{table}{_bar_html(t)}{note}"


def _verdict_html(s: Section, verdict: str) -> str:
    evidence = s.evidence.get(verdict)
    if not evidence:
        return f"<li>{html.escape(verdict)}</li>"
    folded = f'<div class="evidence">{_lines(evidence)}</div>'
    return f"<li><details><summary>{html.escape(verdict)}</summary>{folded}</details></li>"


def _verdicts_html(report: Report) -> str:
    groups = []
    for s in report.sections:
        if s.verdicts:
            items = "".join(_verdict_html(s, v) for v in s.verdicts)
            link = f'<a href="#run-{html.escape(s.run_id)}">{html.escape(s.kind)}</a>'
            groups.append(f'<h3>{link}</h3><ul class="verdicts">{items}</ul>')
    return "".join(groups) or '<ul class="verdicts"><li>no verdicts</li></ul>'


def _section_html(s: Section) -> str:
    parts = [f'<section id="run-{html.escape(s.run_id)}"><h2>{html.escape(s.title)} ({html.escape(s.status)})</h2>']
    if s.facts:
        rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in s.facts)
        parts.append(f'<div class="scroll"><table class="facts">{rows}</table></div>')
    if s.problems:
        items = "".join(f"<li>{html.escape(p)}</li>" for p in s.problems)
        parts.append(f'<ul class="problems">{items}</ul>')
    parts += [_table_html(t) for t in s.tables]
    for p in s.plots:
        data = base64.b64encode(p.png).decode()
        cap = html.escape(p.caption)
        img = f'<img class="plot" alt="{cap}" src="data:image/png;base64,{data}">'
        parts.append(f"<figure>{img}<figcaption>{cap}</figcaption></figure>")
    parts += [f'<p class="note">{html.escape(n)}</p>' for n in s.not_drawn]
    manifest = html.escape(json.dumps(s.manifest, indent=1, default=str))
    run = html.escape(s.run_id)
    summary = f"<summary>Manifest of {run}: versions, flags, hardware</summary>"
    parts.append(f"<details>{summary}<pre>{manifest}</pre></details>")
    parts.append("</section>")
    return "\n".join(parts)


def to_html(report: Report) -> str:
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    runs = " · ".join(f'<a href="#run-{html.escape(s.run_id)}">{html.escape(s.kind)}</a>' for s in report.sections)
    failed = "".join(f"<li>{html.escape(p)}</li>" for p in report.failed)
    answers = "".join(f'<div class="answer">{_table_html(t)}</div>' for t in report.answers)
    title = html.escape(report.title)
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{title}</title>'
        f"<style>{STYLE}</style></head><body><h1>{title}</h1>"
        f'<p class="meta">servelab {__version__}, made {made}; runs: {runs or "none"}</p>'
        + (f'<h2>What failed</h2><ul class="problems">{failed}</ul>' if failed else "")
        + (f'<h2 id="answer">The answer</h2><div class="answers">{answers}</div>' if answers else "")
        + f'<h2 id="verdicts">Verdicts</h2>{_verdicts_html(report)}'
        + "\n".join(_section_html(s) for s in report.sections)
        + "</body></html>"
    )


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


def to_markdown(report: Report) -> str:
    """The answer tables and the short verdicts, nothing else: fit to paste into a post or an issue."""
    out = [f"## {md_escape(report.title)}", ""]
    out += [f"- **failed:** {md_escape(n)}" for n in report.failed] + ([""] if report.failed else [])
    for t in report.answers:
        out += [_table_md(t), ""]
    for s in report.sections:
        out += [f"- **{md_escape(s.kind)}:** {md_escape(v)}" for v in s.verdicts]
    return "\n".join(out).rstrip() + "\n"
