"""Self-contained HTML report: inline CSS, plots embedded as base64 PNG data URIs, no scripts and
no external references, so the file can be mailed or attached to a ticket as is."""
from __future__ import annotations

import base64
from html import escape

from compare.report.content import sections
from compare.report.data import ReportData
from compare.report.plots import PLOTS

_CSS = """
body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1300px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f0f0f0} td:first-child,td:nth-child(2){text-align:left}
li{margin:2px 0} .plot{margin:12px 0 24px} .plot img{max-width:100%;border:1px solid #ddd}
.answer ul{font-size:17px;line-height:1.5} .answer li{margin:4px 0} .answer p{color:#555;font-size:13px}
.caveats li{color:#8a5a00;font-size:13px}
"""


def render_html(d: ReportData) -> str:
    title = f"llm-compare report: {d.run.run_id}"
    plots = {key: (plot_title, fn) for key, plot_title, fn in PLOTS}
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{escape(title)}</title>",
             f"<style>{_CSS}</style></head><body><h1>{escape(title)}</h1>"]
    for s in sections(d):
        drawn = []
        for key in s.plots:  # a plot without data is left out, and so is a section of only such plots
            png = plots[key][1](d)
            if png:
                b64 = base64.b64encode(png).decode()
                head = f"<h3>{escape(plots[key][0])}</h3>" if len(s.plots) > 1 else ""  # else the section's title
                drawn.append(f'<div class="plot" id="plot-{key}">{head}'
                             f'<img alt="{escape(plots[key][0])}" src="data:image/png;base64,{b64}"></div>')
        if s.plots and not drawn and not (s.paragraphs or s.bullets or s.headers):
            continue
        cls = f' class="{s.kind}"' if s.kind else ""
        parts.append(f"<section{cls}><h2>{escape(s.title)}</h2>")
        if s.kind == "answer" and s.bullets:
            parts.append("<ul>" + "".join(f"<li><b>{escape(b)}</b></li>" for b in s.bullets) + "</ul>")
        parts += [f"<p>{escape(p)}</p>" for p in s.paragraphs]
        if s.bullets and s.kind != "answer":
            parts.append("<ul>" + "".join(f"<li>{escape(b)}</li>" for b in s.bullets) + "</ul>")
        if s.headers:
            parts.append("<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in s.headers) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in s.rows]
            parts.append("</table>")
        parts += drawn
        parts.append("</section>")
    parts.append(f"<p><small>rendered from {escape(str(d.path))} (run.json, requests.jsonl) by "
                 f"<code>compare report</code></small></p></body></html>")
    return "\n".join(parts) + "\n"
