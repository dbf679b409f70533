"""`python -m gputop` runs the command-line interface."""

try:
    from gputop.app.cli import main
except KeyboardInterrupt:  # Ctrl-C while Python is still importing: quit quietly
    raise SystemExit(130) from None

raise SystemExit(main())
