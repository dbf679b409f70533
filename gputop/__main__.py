"""`python -m gputop` runs the command-line interface."""

from gputop.cli import main

raise SystemExit(main())
