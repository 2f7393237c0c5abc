"""Typer helper: declare a group of flags once and hand a command one frozen options object.

    @app.command()
    @bundle(RUN_PARAMS, RunOptions, "run_opts")
    def run(run_opts: RunOptions) -> None: ...

`params` is a list of (name, Annotated type, default); `cls(**values)` builds the object.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any


def bundle(params: list[tuple[str, Any, Any]], cls: type, kw: str) -> Callable:
    """Decorator adding `params` to a command's signature and passing `kw=cls(...)`."""
    names = [name for name, _, _ in params]

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn, eval_str=True)
        if kw not in sig.parameters:
            raise TypeError(f"{fn.__name__} must take a `{kw}` parameter")
        own = [p for p in sig.parameters.values() if p.name != kw]
        clash = {p.name for p in own} & set(names)
        if clash:
            raise TypeError(f"{fn.__name__} parameters {sorted(clash)} clash with {kw} flags")
        extra = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=a, default=d)
                 for n, a, d in params]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            picked = {n: kwargs.pop(n) for n in names if n in kwargs}
            return fn(*args, **{kw: cls(**picked)}, **kwargs)

        # Typer reads the signature and the type hints: give it resolved objects for both.
        wrapper.__signature__ = sig.replace(parameters=own + extra)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in own + extra}
        del wrapper.__wrapped__
        return wrapper

    return deco
