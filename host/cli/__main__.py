"""``python -m edgequal.host.cli``: the ``edgequal`` command (main.py)."""

import sys

from .main import main

sys.exit(main())
