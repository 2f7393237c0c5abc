"""--help that reads well at 80 columns: docstrings reflowed into paragraphs, and option
names that wrap instead of being cut off."""

from __future__ import annotations

import inspect

_SHOWN = [True]
"""Whether this process may print an option's help (`wanted`)."""


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
    return "--help" in args or not args or args == ["workload"]


def reflow(doc: str | None) -> str | None:
    """A docstring as help text: its paragraphs (split at blank lines) each joined into one
    line, so the terminal wraps sentences instead of the source's hard line breaks."""
    if not doc:
        return doc
    paras = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paras if p.strip())


def fold_option_names() -> None:
    """Make typer's rich help fold long option names onto a second line rather than cut
    them with an ellipsis (`--max-num-batche…`) when the terminal is narrow."""
    try:
        from typer import rich_utils
    except ImportError:  # typer without rich: plain click help, which never truncates
        return
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
