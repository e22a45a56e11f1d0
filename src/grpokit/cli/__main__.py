"""`python -m grpokit.cli ...` runs the `grpokit` command."""

import sys

from grpokit.cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
