"""steer: see, per flow, where a host's receive work runs and what it costs.

The parser is built from the command modules beside this one (observe, demo, steering,
export, sweep), each of which adds its commands' arguments next to their bodies.
Errors are one line on stderr and a non-zero exit: 2 for bad arguments, 1 for everything
the host refused or lacks.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

from steer import __version__
from steer.cli import demo, export, observe, steering, sweep
from steer.cli.common import (EXIT_ERROR, EXIT_USAGE, HelpFormatter, Parser, UsageError,
                              check_tracer_options, interrupted_status, sigterm)
from steer.kernel.signals import handle_sigint


def build_parser() -> argparse.ArgumentParser:
    fmt = HelpFormatter
    p = Parser(
        prog="steer", description="Per-flow view of where receive work runs (kernel NET_RX and "
        "the reading application), its cost, and its affinity class.",
        epilog="Run 'steer COMMAND --help' for the options of each command.")
    p.add_argument("--version", action="version", version=f"steer {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    for module in (observe, demo, steering, export, sweep):
        COMMANDS.update(module.add_parsers(sub, fmt))
    comp = sub.add_parser("completion", formatter_class=fmt, help="shell completion script",
                          description="Print a completion script for SHELL, generated from this "
                          "parser: commands, options, and the values of options with choices, "
                          "files, devices or namespaces. Install it with: steer completion bash "
                          "> /usr/share/bash-completion/completions/steer")
    comp.add_argument("shell", choices=["bash"], help="the shell")
    sub.add_parser("manpage", formatter_class=fmt, help="the steer(1) man page",
                   description="Print steer(1), generated from this parser (every command and "
                   "option as --help gives them, exit codes, files). Read it with: steer manpage "
                   "| man -l -")
    COMMANDS.update(completion=cmd_completion, manpage=cmd_manpage)
    return p


def cmd_completion(args) -> int:
    from steer.cli.manual import bash_completion
    sys.stdout.write(bash_completion(build_parser()))
    return 0


def cmd_manpage(args) -> int:
    from steer.cli.manual import man_page
    sys.stdout.write(man_page(build_parser()))
    return 0


COMMANDS: dict = {}   # name -> function, filled by build_parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if os.environ.get("STEER_STACKS_ON_SIGUSR2"):
        # where each thread is, on demand: the suite asks a steer that did not stop for it
        import faulthandler
        faulthandler.register(signal.SIGUSR2, all_threads=True)
    try:   # the handlers go in inside it: a stop from the first moment they are in ends here
        signal.signal(signal.SIGTERM, sigterm)
        handle_sigint()
        return _run(args)
    except KeyboardInterrupt:
        return interrupted_status()
    except BrokenPipeError:
        return 0
    except Exception as e:
        if _stop_inside(e):
            return interrupted_status()
        raise


def _stop_inside(e: BaseException | None) -> bool:
    """Whether E was raised because of a stop request: CPython 3.11 raises a RuntimeError from one
    that comes in a descriptor's __set_name__, as a dataclass field's while a module is imported
    (Python 3.12 lets it through). Only causes count, not what a teardown raised after a stop."""
    while e is not None:
        if isinstance(e, KeyboardInterrupt):
            return True
        e = e.__cause__
    return False


# what the host refused or lacks, said in one line: (module, class). Looked up among the modules a
# command loaded (a class whose module was never imported cannot have been raised), so that
# naming them costs no import of the tracer (numpy) for a command that never traces.
ONE_LINE_ERRORS = (("steer.cli.common", "UserError"), ("steer.kernel.privileges", "PrivilegeError"),
                   ("steer.trace.tracer", "TracerError"), ("steer.kernel.errors", "KernelError"),
                   ("steer.experiment.lab", "LabError"), ("steer.steering.xdp", "SteerError"))


def _one_line(e: Exception) -> bool:
    return any(isinstance(e, getattr(sys.modules[m], name)) for m, name in ONE_LINE_ERRORS
               if m in sys.modules)


def _run(args) -> int:
    try:
        check_tracer_options(args)
        return COMMANDS[args.command](args)
    except UsageError as e:
        print(f"steer {args.command}: error: {e} (see steer {args.command} --help)", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:
        if not _one_line(e):
            raise
        print(f"steer {args.command}: error: {e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
