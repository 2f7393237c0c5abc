"""A report as a list of blocks, rendered to Markdown (images linked) or to one
self-contained HTML file (images embedded as data URIs, each linking to its full-size
file next to the page; no request leaves the page).

The HTML reads on a phone: a viewport meta tag, tables that scroll inside their own box,
images that shrink to the width. PNGs are drawn at 2x and shown at half their pixel size,
so they stay sharp on high-density screens."""

from __future__ import annotations

import base64
import html
import struct
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
pre{padding:.6em;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
dt{font-weight:600}dd{margin:0 0 .4em 1.2em}
.scroll{overflow-x:auto;max-width:100%}.scroll table{margin:0}
tr.group th{background:#e8eef7;text-align:left}
.verdict{border:2px solid #2b6cb0;background:#f3f8fd;border-radius:6px;padding:.4em 1em;
margin:1em 0}.verdict h2{border:0;margin:.3em 0;font-size:1.15em}.verdict p{margin:.45em 0}
.banner{border:1px solid #c05621;background:#fffaf0;padding:.5em 1em;border-radius:6px}
.meta{font-size:.8em;color:#555}figure a{display:block}
@media (max-width:600px){body{margin:.5em auto;padding:0 .6em}h1{font-size:1.2em}}
"""


@dataclass
class Document:
    title: str
    blocks: list[tuple] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)
    """Figure file -> why it could not be drawn: the page says so in its place."""

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

    def verdict(self, title: str, lines: list[str]) -> None:
        """The answer, as one box (HTML id `verdict`); lines are Markdown inline."""
        self.blocks.append(("verdict", title, lines))

    def banner(self, text: str) -> None:
        """A warning above everything that follows (Markdown inline)."""
        self.blocks.append(("banner", text))

    def meta(self, text: str) -> None:
        """A small line of run facts (version, commit, time)."""
        self.blocks.append(("meta", text))

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
                case "fig" if b[1] in self.left_out:
                    out.append(f"*Figure {b[1]} left out: {self.left_out[b[1]]}.*\n")
                case "fig":
                    out.append(f"[![{b[2]}]({b[1]})]({_full_size(b[1])})\n\n*{b[2]}*\n")
                case "verdict":
                    out.append(f"> **{b[1]}**\n>\n" + "\n>\n".join(f"> {x}" for x in b[2])
                               + "\n")
                case "banner":
                    out.append(f"> ⚠ {b[1]}\n")
                case "meta":
                    out.append(f"<sub>{b[1]}</sub>\n")
                case "dl":
                    out.append("".join(f"- **{k}**: {v}\n" for k, v in b[1]))
                case "code":
                    out.append(f"```\n{b[1]}\n```\n")
        return "\n".join(out)

    def to_html(self, image_dir: Path) -> str:
        e = html.escape
        out = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
               "<meta name='viewport' content='width=device-width, initial-scale=1'>"
               f"<title>{e(self.title)}</title><style>{_CSS}</style></head><body>"
               f"<h1>{e(self.title)}</h1>"]
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
                    out.append(f"<div class='scroll'>{html_table(b[1], b[2], b[3])}</div>")
                case "fig" if b[1] in self.left_out:
                    out.append(f"<p><em>Figure {e(b[1])} left out: "
                               f"{e(self.left_out[b[1]])}.</em></p>")
                case "fig":
                    raw = (Path(image_dir) / b[1]).read_bytes()
                    data = base64.b64encode(raw).decode()
                    w, h = _png_size(raw)
                    full = _full_size(b[1], Path(image_dir))
                    out.append(f"<figure><a href='{e(full)}' title='full-size figure'>"
                               f"<img alt='{e(b[2])}' width='{w // 2}' height='{h // 2}' "
                               "style='max-width:100%;height:auto' "
                               f"src='data:image/png;base64,{data}'></a>"
                               f"<figcaption>{_inline(b[2])} <a href='{e(full)}'>"
                               "Full size</a>.</figcaption></figure>")
                case "verdict":
                    out.append(f"<section class='verdict' id='verdict'><h2>{e(b[1])}</h2>"
                               + "".join(f"<p>{_inline(x)}</p>" for x in b[2]) + "</section>")
                case "banner":
                    out.append(f"<div class='banner' id='banner'>⚠ {_inline(b[1])}</div>")
                case "meta":
                    out.append(f"<p class='meta'>{_inline(b[1])}</p>")
                case "dl":
                    out.append("<dl>" + "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>"
                                                for k, v in b[1]) + "</dl>")
                case "code":
                    out.append(f"<pre><code>{e(b[1])}</code></pre>")
        out.append("</body></html>\n")
        return "\n".join(out)


def _png_size(raw: bytes) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's IHDR chunk."""
    if raw[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    return struct.unpack(">II", raw[16:24])


def _full_size(png: str, image_dir: Path | None = None) -> str:
    """The figure's full-size file next to the page: its SVG when one was written."""
    svg = png.rsplit(".", 1)[0] + ".svg"
    if image_dir is None or (Path(image_dir) / svg).exists():
        return svg if image_dir is not None else png
    return png


def _inline(text: str) -> str:
    """Escape, then turn `code` spans and **bold** into tags (the Markdown we write)."""
    parts = html.escape(text).split("`")
    s = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
    bits = s.split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(bits))
