"""chunksim: which prefill scheduling policy and chunk size should I run?"""


def __getattr__(name: str):
    """`__version__`, read from the installed package's metadata when first asked for
    (importlib.metadata is slow to import, and most commands never ask)."""
    if name != "__version__":
        raise AttributeError(f"module 'chunksim' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("chunksim")
    except PackageNotFoundError:  # run from a source tree that is not installed
        found = "0+unknown"
    globals()["__version__"] = found
    return found
