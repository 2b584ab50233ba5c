"""Markdown report (tables and words; the plots are in the HTML report)."""
from __future__ import annotations

from compare.report.content import sections
from compare.report.data import ReportData
from compare.report.plots import PLOTS

_TITLES = {key: title for key, title, _ in PLOTS}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(d: ReportData) -> str:
    lines = [f"# llm-compare report: {d.run.run_id}", ""]
    for s in sections(d):
        if s.plots and not (s.paragraphs or s.bullets or s.headers):
            if s.kind == "answer-plot":  # the plot that shows the answer: say where it is
                lines += [f"## {s.title}", "", f"_plot in the HTML report: `compare report {d.path} --html`_", ""]
            continue
        lines += [f"## {s.title}", ""]
        if s.bullets and s.kind == "answer":
            lines += [f"- **{b}**" for b in s.bullets] + [""]
        for p in s.paragraphs:
            lines += [p, ""]
        if s.bullets and s.kind != "answer":
            lines += [f"- {b}" for b in s.bullets] + [""]
        if s.headers:
            lines.append("| " + " | ".join(_cell(h) for h in s.headers) + " |")
            lines.append("|" + "---|" * len(s.headers))
            lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in s.rows]
            lines.append("")
    lines.append(f"_rendered from {d.path} (run.json, requests.jsonl) by `compare report`; "
                 f"`compare report {d.path} --html` adds plots_")
    return "\n".join(lines) + "\n"
