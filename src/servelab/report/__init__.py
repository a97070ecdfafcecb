"""servelab report: stored runs as one self-contained HTML file (or Markdown), side by side; the same sections at
the terminal."""

from servelab.report.bench_view import compare_table
from servelab.report.coexist_plots import plot_intervals
from servelab.report.console import print_section, rich_table, section_tables, summary_table
from servelab.report.sections import section
from servelab.report.write import build_sections, write_report

__all__ = [
    "build_sections",
    "compare_table",
    "plot_intervals",
    "print_section",
    "rich_table",
    "section",
    "section_tables",
    "summary_table",
    "write_report",
]
