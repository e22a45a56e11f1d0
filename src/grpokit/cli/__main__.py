"""`python -m grpokit.cli ...` runs the `grpokit` command."""

from grpokit.cli.commands import main

if __name__ == "__main__":
    main()
