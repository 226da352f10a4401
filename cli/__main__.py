"""``python -m edgequal.cli``: the ``edgequal`` command (main.py)."""

import sys

from .main import main

sys.exit(main())
