"""Reports rendered only from a results directory (run.json, requests.jsonl): Markdown and a
self-contained HTML page with embedded PNG plots. Old runs can be re-rendered at any time."""
from compare.report.data import ReportData, load_report_data
from compare.report.html import render_html
from compare.report.markdown import render_markdown

__all__ = ["ReportData", "load_report_data", "render_html", "render_markdown"]
