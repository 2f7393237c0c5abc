"""`python -m chunksim.cli`: the `sim` command."""

from chunksim.cli import main

main()
