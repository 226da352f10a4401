"""Build edgequal's example models (ONNX and TFLite) into a folder, with no download.

Usage: python scripts/make_example_models.py OUT_DIR [--only NAME ...]
Prints one line per model: name, path, size in bytes, sha256.
"""

from __future__ import annotations

import argparse
import hashlib
import sys

from edgequal.host.errors import HostError
from edgequal.host.examples.catalog import EXAMPLES, build_all, build_example


def main(argv: list[str] | None = None) -> int:
    """Build the requested example models and print what was written; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="folder to write the models into (created if missing)")
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", choices=list(EXAMPLES), help="build only these models"
    )
    args = parser.parse_args(argv)
    try:
        if args.only:
            paths = {name: build_example(name, args.out_dir) for name in args.only}
        else:
            paths = build_all(args.out_dir)
    except HostError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    width = max(len(str(path)) for path in paths.values())
    for name, path in paths.items():
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        print(f"{name:<18} {str(path):<{width}} {len(data):>8} B  sha256:{digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
