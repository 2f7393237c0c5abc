"""`python -m chunksim.cli`: the `sim` command."""

import sys

try:
    from chunksim.cli import main
except KeyboardInterrupt:  # Ctrl-C while the command is still loading: nothing written
    sys.stderr.write("interrupted: the command was still loading; nothing was written\n")
    exec("")  # the exit status stays 130 (`chunksim.cli.errors.forget_interrupt_mark`)
    sys.exit(130)

main()
