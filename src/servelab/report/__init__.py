"""servelab report: stored runs as one self-contained HTML file (or Markdown), the answer first; the same at the
terminal."""

from servelab.report.bench_view import compare_table
from servelab.report.coexist_plots import plot_intervals
from servelab.report.console import print_section, print_summary, rich_table, section_tables, summary_table
from servelab.report.document import Report, build_report, report_runs
from servelab.report.sections import section
from servelab.report.write import build_sections, report_text, write_report

__all__ = [
    "Report",
    "build_report",
    "build_sections",
    "compare_table",
    "plot_intervals",
    "print_section",
    "print_summary",
    "report_runs",
    "report_text",
    "rich_table",
    "section",
    "section_tables",
    "summary_table",
    "write_report",
]
