"""A report as a list of blocks, rendered to Markdown (images linked) or to one
self-contained HTML file (images embedded as data URIs)."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path

from chunksim.reports.tables import html_table, markdown

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1150px;
margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.5em}
h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.8em}
table{border-collapse:collapse;font-size:.85em;margin:.6em 0}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:right}
th:first-child,td:first-child,table.text td,table.text th{text-align:left}th{background:#f3f3f3}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.85em;color:#555}code,pre{background:#f6f6f6;font-size:.85em}
pre{padding:.6em;overflow-x:auto}dt{font-weight:600}dd{margin:0 0 .4em 1.2em}
"""


@dataclass
class Document:
    title: str
    blocks: list[tuple] = field(default_factory=list)

    def heading(self, text: str) -> None:
        self.blocks.append(("h", text))

    def para(self, text: str) -> None:
        self.blocks.append(("p", text))

    def bullets(self, items: list[str]) -> None:
        self.blocks.append(("ul", items))

    def table(self, headers: list[str], rows: list[list[str]], numeric: bool = True) -> None:
        self.blocks.append(("table", headers, rows, numeric))

    def figure(self, filename: str, caption: str) -> None:
        self.blocks.append(("fig", filename, caption))

    def definitions(self, pairs: list[tuple[str, str]]) -> None:
        self.blocks.append(("dl", pairs))

    def code(self, text: str) -> None:
        self.blocks.append(("code", text))

    def to_markdown(self) -> str:
        out = [f"# {self.title}\n"]
        for b in self.blocks:
            match b[0]:
                case "h":
                    out.append(f"## {b[1]}\n")
                case "p":
                    out.append(f"{b[1]}\n")
                case "ul":
                    out.append("".join(f"- {i}\n" for i in b[1]))
                case "table":
                    out.append(markdown(b[1], b[2], b[3]))
                case "fig":
                    out.append(f"![{b[2]}]({b[1]})\n\n*{b[2]}*\n")
                case "dl":
                    out.append("".join(f"- **{k}**: {v}\n" for k, v in b[1]))
                case "code":
                    out.append(f"```\n{b[1]}\n```\n")
        return "\n".join(out)

    def to_html(self, image_dir: Path) -> str:
        e = html.escape
        out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(self.title)}"
               f"</title><style>{_CSS}</style></head><body><h1>{e(self.title)}</h1>"]
        for b in self.blocks:
            match b[0]:
                case "h":
                    out.append(f"<h2>{e(b[1])}</h2>")
                case "p":
                    out.append(f"<p>{_inline(b[1])}</p>")
                case "ul":
                    out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b[1])
                               + "</ul>")
                case "table":
                    out.append(html_table(b[1], b[2], b[3]))
                case "fig":
                    data = base64.b64encode((Path(image_dir) / b[1]).read_bytes()).decode()
                    out.append(f"<figure><img alt='{e(b[2])}' src='data:image/png;base64,"
                               f"{data}'><figcaption>{e(b[2])}</figcaption></figure>")
                case "dl":
                    out.append("<dl>" + "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>"
                                                for k, v in b[1]) + "</dl>")
                case "code":
                    out.append(f"<pre><code>{e(b[1])}</code></pre>")
        out.append("</body></html>\n")
        return "\n".join(out)


def _inline(text: str) -> str:
    """Escape, then turn `code` spans and **bold** into tags (the Markdown we write)."""
    parts = html.escape(text).split("`")
    s = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
    bits = s.split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(bits))
