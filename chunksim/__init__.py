"""chunksim: which prefill scheduling policy and chunk size should I run?"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("chunksim")
except PackageNotFoundError:  # run from a source tree that is not installed
    __version__ = "0+unknown"
