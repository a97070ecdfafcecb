"""No user or server text is markup: names with ``:100:``, ``[bold]``, ``[/]`` and emoji codes come out verbatim at
the console, in the HTML report and in the Markdown report, whether they reach it through a real bench (scenario and
target names, a file name) or through any field of a report section (a server's error, a model's reply)."""

from __future__ import annotations

import ast
import io
import re
from html.parser import HTMLParser
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

import servelab
from servelab.cli import main
from servelab.cli._common import using_console
from servelab.core.terminal import make_console
from servelab.report import print_section
from servelab.report.document import assemble
from servelab.report.model import Section, Table
from servelab.report.render import md_escape, to_html, to_markdown

HOSTILE = [
    "synthetic:100:8",
    "[bold]mine[/]",
    "a [/] b",
    ":smile: :+1: :thumbsup:",
    "[red]unclosed",
    "`tick` *star* _under_ <b>tag</b> &amp; $x$ | pipe ~~gone~~ \\back",
]


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def html_text(markup: str) -> str:
    """What a browser shows of an HTML document (its text nodes, entities decoded)."""
    parser = _Text()
    parser.feed(markup)
    return "".join(parser.parts)


def markdown_text(source: str) -> str:
    """What a CommonMark renderer (with tables) shows of a Markdown document."""
    return html_text(MarkdownIt("commonmark").enable("table").render(source))


def hostile_section() -> Section:
    s = Section("r1", "bench", f"bench {HOSTILE[1]}", "complete", {"servelab_version": "x"})
    s.facts = [(f"target {HOSTILE[1]}", f"{HOSTILE[0]} at http://h:8000 ({HOSTILE[3]})")]
    rows = [[h, "1.0 [0.9, 1.1]"] for h in HOSTILE]
    s.tables.append(Table(f"Side by side {HOSTILE[2]}", ["scenario", HOSTILE[3]], rows, note=f"note {HOSTILE[4]}"))
    s.verdicts = [f"{h} on fx: 50.2 tok/s per stream" for h in HOSTILE]
    s.problems = [f'requests failed: bench/{HOSTILE[0]}: 1 of 2 failed: bad request (1): "{h}"' for h in HOSTILE]
    return s


def test_every_field_of_a_section_is_verbatim_at_the_console_in_html_and_in_markdown() -> None:
    section = hostile_section()
    out = make_console(width=400, record=True, file=io.StringIO(), color_system=None)
    print_section(out, section)
    shown = {"console": out.export_text(), "html": html_text(to_html(assemble([section]))),
             "markdown": markdown_text(to_markdown(assemble([section])))}  # fmt: skip
    for where, text in shown.items():
        for name in HOSTILE:
            assert name in text, (where, name, text)
        assert f"{HOSTILE[0]} on fx: 50.2 tok/s" in text and "💯" not in text and "😄" not in text, where


def test_no_emoji_code_reaches_markdown_bare() -> None:
    """GitHub turns ``:100:`` into an emoji even escaped; in a code span it stays as written."""
    source = to_markdown(assemble([hostile_section()]))
    outside_code = "".join(source.split("`")[::2])
    assert ":100:" not in outside_code and ":smile:" not in outside_code and "`:100:`" in source


MARKUP = ["[bold]", "[/]", "[/bold]", "[red on blue]", "[link=https://x]", "[@click=quit]", ":100:", ":smile:", ":+1:",
          ":thumbs_up:", "\\", "\\[", "[", "]", ":", "*", "_", "`", "<b>", "</b>", "&amp;", "&#35;", "$", "|", "~", "#",
          "- ", "1. ", "> ", "http://a.b/c", "<http://a>"]  # fmt: skip
ANY = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp")), max_size=12)
TEXT = st.lists(st.one_of(st.sampled_from(MARKUP), ANY), max_size=8).map("".join)


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_any_text_prints_and_renders_as_written(text: str) -> None:
    """Whatever a name or a server's words hold (brackets, colons, backslashes, emoji, Markdown), the console prints
    it and a Markdown renderer shows it as written."""
    out = make_console(width=1000, record=True, file=io.StringIO(), color_system=None, soft_wrap=True)
    out.print(text)
    assert out.export_text() == text + "\n"
    cell = " ".join(text.split())  # a table cell, as Markdown keeps one: runs of spaces collapse, ends trimmed
    assert f"x{cell}x" in markdown_text(f"| h |\n|---|\n| x{md_escape(cell)}x |\n")


def test_a_control_sequence_from_a_server_shows_as_its_picture() -> None:
    out = make_console(width=200, record=True, file=io.StringIO(), color_system=None)
    out.print('error: bad request: "\x1b[2J\x1b[31mgone\x07"')
    section = hostile_section()
    section.problems = ["server said \x1b]0;title\x07"]
    print_section(out, section)
    text = out.export_text()
    assert "\x1b" not in text and "\x07" not in text and "␛[2J␛[31mgone␇" in text and "␛]0;title" in text


def test_a_bench_with_hostile_names_prints_and_reports_them_verbatim(fixture_server: str, tmp_path: Path) -> None:
    """The issue's `--scenario synthetic:100:8` printed as `synthetic💯8`: a real bench with that scenario, a file of
    prompts named with markup and emoji codes, and a target named so, at the console (bar, tables, verdicts) and in
    both reports."""
    folder = tmp_path / "odd["
    folder.mkdir()
    prompts = folder / "][bold]mine:100: :smile:.jsonl"  # its path holds "[/]": a folder "odd[", a file "]..."
    prompts.write_text('{"prompt": "hi [bold]there[/] :100:"}\n{"prompt": "two"}\n')
    target = "t[/]:+1:[b]"
    store = str(tmp_path / "s.sqlite")
    argv = ["bench", "--target", f"{target}={fixture_server}/schedule", "--scenario", "synthetic:100:8", "--scenario",
            str(prompts), "--requests", "2", "--max-tokens", "4", "--warmup", "0", "--store", store]  # fmt: skip
    out = make_console(width=200, record=True, file=io.StringIO(), color_system=None)
    with using_console(out):
        assert main(argv) == 0
        assert main(["report", "--store", store, "--out", str(tmp_path / "r.html")]) == 0
        assert main(["report", "--store", store, "--markdown", "--out", str(tmp_path / "r.md")]) == 0
    names = ["synthetic:100:8", "][bold]mine:100: :smile:", target]
    shown = {"console": out.export_text(), "html": html_text((tmp_path / "r.html").read_text()),
             "markdown": markdown_text((tmp_path / "r.md").read_text())}  # fmt: skip
    for where, text in shown.items():
        for name in names:
            assert name in text, (where, name)
        assert "💯" not in text and "😄" not in text and "👍" not in text, where
    assert "synthetic:100:8 on t[/]:+1:[b]" in shown["console"]  # the bar


STYLE_TAG = re.compile(r"\[/?(?:bold|dim|italic|red|green|yellow|blue|cyan|magenta|underline)\b[^\]]*\]|\[/\]")
SRC = Path(servelab.__file__).parent


def _strings(tree: ast.AST) -> list[ast.Constant]:
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }  # fmt: skip
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]


def test_servelab_styles_with_text_never_with_markup() -> None:
    """servelab's consoles read no markup, so a ``[bold]`` in a string would print as written, and rich's escape()
    would print its backslashes: styling goes in as Text (servelab.core.terminal.styled / line)."""
    found = []
    for path in SRC.rglob("*.py"):
        tree, where = ast.parse(path.read_text()), path.relative_to(SRC)
        found += [f"{where}:{n.lineno}: {n.value!r}" for n in _strings(tree) if STYLE_TAG.search(n.value)]
        found += [f"{where}: imports rich.markup" for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom) and node.module == "rich.markup"]  # fmt: skip
    assert not found, "\n".join(found)
