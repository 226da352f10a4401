"""``edgequal``: the host CLI's entry point. A thin layer over the host library.

Exit codes: 0 pass, 1 gate or verification failed (or a failed qualification),
2 bad usage or input file, 3 device, transport or runtime failure. Errors print
one line with a hint; tracebacks only with --debug. Only argparse is imported at
start, so ``edgequal --help`` is fast; a command's module is imported when it runs.
"""

from __future__ import annotations

import functools

from .parser import build_parser


@functools.cache
def _parser():
    """The command tree, built once a process (about 20 ms: ~60 commands' flags): a library
    or test calling :func:`main` many times parses against the same one. Parsing only reads
    it: each call gets a fresh namespace, and an ``append`` flag copies its default list
    before adding to it."""
    return build_parser()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``edgequal``."""
    args = _parser().parse_args(argv)
    import sys

    # What was typed, for the sidecar beside each report (host/devices/reproduce.py).
    args.argv = list(sys.argv[1:] if argv is None else argv)
    from edgequal.contract.errors import EdgequalError

    try:
        return _dispatch(args)
    except EdgequalError as e:  # HostError and AgentError alike
        if args.debug:
            raise
        from ..host.present.terminal.summary import print_error

        print_error(str(e), e.hint)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug, not a user error: still one line unless --debug
        if args.debug:
            raise
        from ..host.present.terminal.summary import print_error

        print_error(
            f"internal error: {type(e).__name__}: {e}", "run again with --debug for the traceback"
        )
        return 3


def _dispatch(args) -> int:
    """Run the command (its module's heavy imports happen inside it, only now)."""
    if args.command == "demo":
        from .qualify import cmd_demo

        return cmd_demo(args)
    if args.command == "qualify":
        from .qualify import cmd_qualify

        return cmd_qualify(args)
    if args.command == "golden":
        from .qualify import cmd_golden_make

        return cmd_golden_make(args)
    if args.command == "verify":
        from .judge import cmd_verify

        return cmd_verify(args)
    if args.command == "devices":
        from .devices import cmd_devices

        return cmd_devices(args)
    if args.command == "runs":
        from .devices import cmd_runs

        return cmd_runs(args)
    if args.command == "agent":
        from .devices import cmd_agent

        return cmd_agent(args)
    if args.command in ("gate", "compare", "report"):
        from .judge import cmd_gate_compare_report

        return cmd_gate_compare_report(args)
    if args.command == "export":
        from .judge import cmd_export

        return cmd_export(args)
    if args.command == "key":
        from .judge import cmd_key

        return cmd_key(args)
    if args.command == "fleet":
        from .fleet import cmd_fleet

        return cmd_fleet(args)
    if args.command == "history":
        from .history import cmd_history

        return cmd_history(args)
    if args.command == "bisect":
        from .bisect import cmd_bisect

        return cmd_bisect(args)
    if args.command == "rerun":
        from .rerun import cmd_rerun

        return cmd_rerun(args)
    if args.command == "approve":
        from .fleet import cmd_approve

        return cmd_approve(args)
    if args.command == "completion":
        return _cmd_completion(args)
    raise AssertionError(args.command)


def _cmd_completion(args) -> int:
    """``completion SHELL``: shtab writes the script from the parser itself, so it never
    falls behind a new command or option (a host dependency; the agent has none)."""
    import shtab

    from ..host.present.terminal.summary import write_json

    write_json(shtab.complete(build_parser(), shell=args.shell).rstrip("\n"))
    return 0
