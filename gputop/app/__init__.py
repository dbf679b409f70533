"""Commands: argument parsing, one module per command, child processes."""
