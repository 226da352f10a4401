"""argparse pieces both CLIs share (``edgequal`` imports them from here; the agent never
imports the host): one-line usage errors with a suggestion, global options on either
side of the subcommand, the examples that end every command's ``--help``, and the
command-line text both read into plan fields (durations such as ``10m``, ``--shape
NAME=1x3x224x224``; the library reads its keywords' text with the same rules).

argparse only at import, so ``--help`` stays fast on a small board.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable, Iterator

from .errors import BadInput

_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<given>[^']*)' \(choose from (?P<choices>.*)\)")
# A value that starts with "-" but is numbers: "-1", "-0.5", "-1,1", "-0.5,-0.5,-0.5",
# "-1e-3". argparse before 3.13 takes only a lone negative number as a value and reads
# "--range -1,1" as an option "-1,1"; no option of either CLI looks like this.
_NUMBERS_VALUE = re.compile(r"^-\.?\d[\d.,eE+-]*$")


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line: the problem, then a hint.

    An unknown command or choice is answered with the closest known one ("did you
    mean"); anything else points at the command's ``--help``. Exit code 2, as
    argparse's own errors. Subparsers are made of the same class. A value that starts
    with ``-`` and is made of numbers (``--range -1,1``, ``--mean -0.5,-0.5``) is a value,
    not an unknown option.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # argparse's own rule for "a negative number is a value" (its only hook for it).
        self._negative_number_matcher = _NUMBERS_VALUE

    def error(self, message: str):
        message, hint = with_suggestion(message)
        self.exit(2, f"{self.prog}: error: {message} (hint: {hint or self.prog + ' --help'})\n")


def with_suggestion(message: str) -> tuple[str, str | None]:
    """argparse's message and a hint: for an "invalid choice", the closest known one
    ("did you mean 'X'?", the list of choices then left out) or the choices."""
    m = _INVALID_CHOICE.search(message)
    if m is None:
        return message, None
    choices = [c.strip().strip("'") for c in m["choices"].split(",")]
    close = difflib.get_close_matches(m["given"], choices, n=1, cutoff=0.5)
    if close:
        return message[
            : m.start()
        ] + f"invalid choice: '{m['given']}'", f"did you mean '{close[0]}'?"
    return message, None


def subparsers_of(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser below ``parser``, at any depth, once each, with its command path."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen = set()
            for sub in action.choices.values():
                if id(sub) in seen:
                    continue
                seen.add(id(sub))
                yield sub.prog, sub
                yield from subparsers_of(sub)


def spread_global_options(
    parser: argparse.ArgumentParser, add: Callable[[argparse.ArgumentParser, bool], None]
) -> None:
    """Give every subcommand, at any depth, the global options ``add(parser, top)`` adds.

    ``add`` was called with ``top=True`` on the top parser, which holds the defaults;
    below it a default would overwrite what was given before the subcommand, so
    there ``add`` must use ``argparse.SUPPRESS`` as the default (``top=False``).
    """
    for _, sub in subparsers_of(parser):
        add(sub, False)


def global_default(top: bool, value):
    """The default a global option has: ``value`` on the top parser, none below it."""
    return value if top else argparse.SUPPRESS


def examples(parser: argparse.ArgumentParser, *lines: str) -> argparse.ArgumentParser:
    """End ``parser``'s ``--help`` with ``examples:`` and these command lines."""
    parser.epilog = "examples:\n" + "".join(f"  {line}\n" for line in lines)
    if parser.formatter_class is argparse.HelpFormatter:
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")


def parse_duration_s(text: str) -> float:
    """``90s``, ``10m``, ``1.5h``, ``500ms`` or a bare number of seconds; negative is refused."""
    m = _DURATION.match(str(text))
    if not m:
        raise BadInput(f"cannot read duration '{text}'", hint="write e.g. 30s, 10m or 1h")
    value = float(m.group(1))
    if value < 0:
        raise BadInput(f"duration must not be negative: '{text}'")
    unit = m.group(2) or "s"
    return value * {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}[unit]


def parse_shape_args(items: list[str]) -> dict[str, list[int]]:
    """``NAME=1x3x224x224`` arguments into a shapes mapping."""
    shapes = {}
    for item in items or []:
        name, sep, dims = item.partition("=")
        try:
            values = [int(d) for d in dims.lower().split("x")] if dims else []
        except ValueError:
            values = []
        if not sep or not name or not values or any(v <= 0 for v in values):
            raise BadInput(f"cannot read --shape '{item}'", hint="write NAME=1x3x224x224")
        shapes[name] = values
    return shapes
