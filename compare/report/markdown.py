"""Markdown report (tables and words; the plots are in the HTML report)."""
from __future__ import annotations

from compare.report.content import sections
from compare.report.data import ReportData


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(d: ReportData) -> str:
    lines = [f"# llm-compare report: {d.run.run_id}", ""]
    for s in sections(d):
        lines += [f"## {s.title}", ""]
        for p in s.paragraphs:
            lines += [p, ""]
        if s.bullets:
            lines += [f"- {b}" for b in s.bullets] + [""]
        if s.headers:
            lines.append("| " + " | ".join(_cell(h) for h in s.headers) + " |")
            lines.append("|" + "---|" * len(s.headers))
            lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in s.rows]
            lines.append("")
    lines.append(f"_rendered from {d.path} (run.json, requests.jsonl) by `compare report`; "
                 f"`compare report {d.path} --html` adds plots_")
    return "\n".join(lines) + "\n"
