"""``golden make``'s input contract from the command line: what the model was trained on
(layout, range, mean and std, scale, colour order, resize), for every input, over an optional
``--preprocessing`` TOML's per-input keys (docs/measurement.md). ``add_input_contract_options``
puts the flags on a parser, ``declared_preprocessing`` reads them back.
"""

from __future__ import annotations

from pathlib import Path


def add_input_contract_options(gm) -> None:
    """The input-contract flags of ``golden make`` (one argument group), read back by
    :func:`declared_preprocessing`."""
    pre = gm.add_argument_group(
        "input contract",
        "what the model was trained on (every input; per input in a TOML, see docs/measurement.md)",
    )
    pre.add_argument(
        "--preprocessing", type=Path, metavar="TOML", help="default: a TOML beside --inputs"
    )
    pre.add_argument("--layout", choices=("NCHW", "NHWC"), type=str.upper)
    pre.add_argument("--range", metavar="LO,HI", help="values the model was trained on, e.g. 0,1")
    pre.add_argument("--mean", metavar="M[,M..]", help="normalization mean per channel")
    pre.add_argument("--std", metavar="S[,S..]", help="normalization std per channel")
    pre.add_argument("--scale", type=float, help="scale applied to 8-bit pixels, e.g. 0.00392")
    pre.add_argument("--color-order", choices=("RGB", "BGR", "GRAY"), type=str.upper)
    pre.add_argument("--resize", metavar="HxW", help="the size inputs were resized to")


def declared_preprocessing(args) -> dict:
    """The input-contract flags as ``{"*": keys}`` over an optional ``--preprocessing`` TOML's."""
    from ..host.errors import UsageError
    from ..host.preprocessing import read_preprocessing_toml

    def numbers(flag: str, text: str | None) -> list[float] | None:
        if text is None:
            return None
        try:
            return [float(x) for x in text.split(",")]
        except ValueError:
            raise UsageError(f"{flag} takes numbers separated by commas, not {text!r}") from None

    resize = None
    if args.resize is not None:
        h, _, w = args.resize.lower().partition("x")
        if not (h.isdigit() and w.isdigit()):
            raise UsageError(f"--resize takes HEIGHTxWIDTH, e.g. 224x224, not {args.resize!r}")
        resize = [int(h), int(w)]
    flags = {
        "layout": args.layout,
        "range": numbers("--range", args.range),
        "mean": numbers("--mean", args.mean),
        "std": numbers("--std", args.std),
        "scale": args.scale,
        "color_order": args.color_order,
        "resize": resize,
    }
    if args.preprocessing and args.raw:
        raise UsageError(
            "--preprocessing declares prepared inputs; with --raw the keys go in --pipeline"
        )
    declared = read_preprocessing_toml(args.preprocessing) if args.preprocessing else {}
    declared.setdefault("*", {}).update({k: v for k, v in flags.items() if v is not None})
    return declared
