"""servelab report: stored runs as one self-contained HTML file (or Markdown), side by side."""

from servelab.report.coexist_plots import plot_intervals
from servelab.report.console import summary_table
from servelab.report.write import build_sections, write_report

__all__ = ["build_sections", "plot_intervals", "summary_table", "write_report"]
