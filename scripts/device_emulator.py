#!/usr/bin/env python3
"""The device emulator from a shell: ``edgequal.host.examples.device_emulator`` (its docstring
says what the tree holds), run as a script next to an agent::

    python scripts/device_emulator.py --root /tmp/board --watch-pid $(pgrep -n edgequal-agent)
"""

import sys

from edgequal.host.examples.device_emulator import main

if __name__ == "__main__":
    sys.exit(main())
