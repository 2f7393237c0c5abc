"""--help that reads well at 80 columns and in a pipe: docstrings reflowed into
paragraphs, option names never cut or broken (each is whole on its line, so `sim run
--help | grep speculative` finds whole names), and each option's help its first sentence
unless `--help-all` asks for the whole text."""

from __future__ import annotations

import inspect
import re
import textwrap

_SHOWN = [True]
"""Whether this process may print an option's help (`wanted`)."""
_FULL = [False]
"""Whether --help shows each option's whole help (`--help-all`) or its first sentence."""
HELP_ALL = "--help-all"
"""The flag that shows every option's whole help text (`--help` shows the first sentence)."""
NAME_COLUMN = 32
"""Widest option-name column before the help starts on the line below the name."""


def wanted() -> bool:
    """Whether this process may print --help: options build their help text (a knob's is
    its docstring, read from its module's source) only then. True unless `main` saw a
    command line that asks for none (`skip`)."""
    return _SHOWN[0]


def skip() -> None:
    """This process prints no --help: options leave their help text out (building it
    parses the source of every module that declares a knob)."""
    _SHOWN[0] = False


def asks_help(args: list[str]) -> bool:
    """Whether the command line `args` (without the program name) shows help: --help,
    nothing at all, or a command group alone (`sim workload`, `no_args_is_help`). Errors
    print usage and the error only, no option's help."""
    return "--help" in args or HELP_ALL in args or not args or args == ["workload"]


def take_help_all(args: list[str]) -> list[str]:
    """`args` with `--help-all` read: it becomes `--help`, and each option's whole help
    text is shown (`full`)."""
    if HELP_ALL not in args:
        return args
    _FULL[0] = True
    return [("--help" if a == HELP_ALL else a) for a in args]


def full() -> bool:
    return _FULL[0]


_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)(?<!\betc)[.;](?=\s+[A-Z(`'\"-])")


def first_sentence(text: str) -> str:
    """The help text up to its first sentence's end (the whole text when it is one)."""
    m = _SENTENCE_END.search(text)
    if m is None:
        return text.strip()
    return text[:m.start() + 1].strip()


_CLAUSE_END = re.compile(r" \(|: |; | - ")


def gist(text: str, least: int = 16) -> str:
    """What short --help shows of an option: its first sentence up to where the details
    start (a parenthesis, a colon, a semicolon), when at least `least` characters come
    before it."""
    tags = _TAGS.search(text)
    tail = tags.group(0) if tags else ""
    text = first_sentence(text[:len(text) - len(tail)])
    for m in _CLAUSE_END.finditer(text):
        if m.start() >= least:
            text = text[:m.start()].rstrip(",")
            break
    return text + tail


_TAGS = re.compile(r"(\s*\[[^\]]*\])+$")
"""Bracketed notes that end a help text (`[x>0]`): the range a flag enforces."""


def reflow(doc: str | None) -> str | None:
    """A docstring as help text: its paragraphs (split at blank lines) each joined into one
    line, so the terminal wraps sentences instead of the source's hard line breaks."""
    if not doc:
        return doc
    paras = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paras if p.strip())


def fold_option_names() -> None:
    """Make typer's rich help print its option panels as `plain_panel` does (names whole,
    the help wrapped beside or below them, short unless `--help-all`), and rich's
    highlighters fold a long name rather than cut it with an ellipsis
    (`--max-num-batche…`) anywhere else when the terminal is narrow."""
    try:
        from typer import rich_utils
    except ImportError:  # typer without rich: plain click help, which never truncates
        return
    if not getattr(rich_utils._print_options_panel, "_chunksim", False):
        plain_panel._chunksim = True
        rich_utils._print_options_panel = plain_panel
        original = rich_utils.rich_format_help

        def format_help(*, obj, ctx, markup_mode):
            original(obj=obj, ctx=ctx, markup_mode=markup_mode)
            if not full() and any(getattr(p, "help", None) for p in obj.get_params(ctx)):
                rich_utils._get_rich_console().print(
                    f"Each option shows the gist of its help; {HELP_ALL} shows the whole "
                    "text.", style="dim", highlight=False)

        rich_utils.rich_format_help = format_help
    for attr in ("highlighter", "negative_highlighter"):
        base = getattr(rich_utils, attr, None)
        if base is None or getattr(base, "_chunksim_fold", False):
            continue

        class _Folding(type(base)):  # type: ignore[misc]
            _chunksim_fold = True

            def __call__(self, text):
                out = super().__call__(text)
                out.overflow = "fold"
                return out

        setattr(rich_utils, attr, _Folding())


def option_entry(param, ctx) -> tuple[str, str, str]:
    """(names, metavar, help) of one click parameter as its help row shows it."""
    from typer.core import TyperArgument, TyperOption

    names = ", ".join([*param.opts, *param.secondary_opts]) if not isinstance(
        param, TyperArgument) else (param.metavar or param.name or "").upper()
    meta = ""
    if isinstance(param, TyperOption) and not param.is_flag:
        meta = param.make_metavar(ctx=ctx)
        rng = getattr(param.type, "_describe_range", None)
        if rng is not None:
            meta = f"{meta} {rng()}"
    text = " ".join((getattr(param, "help", None) or "").split()).replace("\\[", "[")
    if not full():
        text = gist(text)
    if isinstance(param, (TyperOption, TyperArgument)):
        value = param._extract_default_help_str(ctx=ctx)
        is_str = isinstance(param.show_default, str)
        if is_str or (value is not None and (param.show_default or ctx.show_default)):
            shown = param._get_default_string(ctx=ctx, show_default_is_str=is_str,
                                              default_value=value)
            if shown:
                text = f"{text} [default: {shown}]".strip()
    if param.required:
        text = f"{text} [required]".strip()
    return names, meta, text


def option_lines(entries: list[tuple[str, str, str]], width: int) -> list[tuple[str, str]]:
    """(names, rest) per printed line of `entries` within `width` columns. An option's
    names are never broken: one line holds them (several names wrap between names, never
    inside one), then its metavar when it fits there; its help sits beside them when they
    fit `NAME_COLUMN`, else on the lines below, indented to it."""
    col = min(NAME_COLUMN, width * 2 // 5,
              max((len(f"{n} {m}".strip()) for n, m, _ in entries), default=0) + 2)

    def wrap(text: str, w: int) -> list[str]:
        return textwrap.wrap(text, max(20, w), break_on_hyphens=False)

    out: list[tuple[str, str]] = []
    for names, meta, text in entries:
        head = f"{names} {meta}".strip()
        if len(head) + 2 <= col:
            lines = wrap(text, width - col) or [""]
            out.append((names, (" " + meta if meta else "").ljust(col - len(names))
                        + lines[0]))
            out += [("", " " * col + ln) for ln in lines[1:]]
            continue
        packed: list[str] = []
        for n in names.split(", "):
            if packed and len(packed[-1]) + 2 + len(n) <= width:
                packed[-1] += ", " + n
            else:
                packed.append(n)
        out += [(n, "") for n in packed]
        if meta and len(packed[-1]) + 1 + len(meta) <= width:
            out[-1] = (packed[-1], " " + meta)
        elif meta:  # a long choice list wraps under the names
            out += [("", "    " + ln) for ln in wrap(meta, width - 4)]
        out += [("", " " * col + ln) for ln in wrap(text, width - col)]
    return out


def plain_panel(*, name: str, params: list, ctx, markup_mode, console) -> None:
    """One titled box of options (typer's `_print_options_panel`'s place): each option's
    names whole on one line, its metavar and help wrapped within the box."""
    from rich.panel import Panel
    from rich.text import Text

    if not params:
        return
    from typer import rich_utils

    inner = max(40, (console.width or 80) - 4)
    body = Text(no_wrap=True, overflow="ignore")
    rows = option_lines([option_entry(p, ctx) for p in params], inner)
    for i, (names, rest) in enumerate(rows):
        if i:
            body.append("\n")
        body.append(names, style=rich_utils.STYLE_OPTION)
        body.append(rest)
    console.print(Panel(body, border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER,
                        title=name, title_align=rich_utils.ALIGN_OPTIONS_PANEL))
