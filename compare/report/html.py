"""Self-contained HTML report: inline CSS, plots embedded as base64 PNG data URIs, no scripts and
no external references, so the file can be mailed or attached to a ticket as is."""
from __future__ import annotations

import base64
from html import escape

from compare.report.content import sections
from compare.report.data import ReportData
from compare.report.plots import all_plots

_CSS = """
body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1300px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f0f0f0} td:first-child,td:nth-child(2){text-align:left}
li{margin:2px 0} .plot{margin:12px 0 24px} .plot img{max-width:100%;border:1px solid #ddd}
.caveats li{color:#8a5a00}
"""


def render_html(d: ReportData) -> str:
    title = f"llm-compare report: {d.run.run_id}"
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{escape(title)}</title>",
             f"<style>{_CSS}</style></head><body><h1>{escape(title)}</h1>"]
    for s in sections(d):
        cls = ' class="caveats"' if s.title.startswith("Caveats") else ""
        parts.append(f"<section{cls}><h2>{escape(s.title)}</h2>")
        parts += [f"<p>{escape(p)}</p>" for p in s.paragraphs]
        if s.bullets:
            parts.append("<ul>" + "".join(f"<li>{escape(b)}</li>" for b in s.bullets) + "</ul>")
        if s.headers:
            parts.append("<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in s.headers) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in s.rows]
            parts.append("</table>")
        parts.append("</section>")
    parts.append("<section><h2>Plots</h2>")
    for key, plot_title, png in all_plots(d):
        b64 = base64.b64encode(png).decode()
        parts.append(f'<div class="plot" id="plot-{key}"><h3>{escape(plot_title)}</h3>'
                     f'<img alt="{escape(plot_title)}" src="data:image/png;base64,{b64}"></div>')
    parts.append(f"</section><p><small>rendered from {escape(str(d.path))} (run.json, requests.jsonl) by "
                 f"<code>compare report</code></small></p></body></html>")
    return "\n".join(parts) + "\n"
