"""steer.cli: the command line: argument parsing and each command, the man page and completion,
logging."""
