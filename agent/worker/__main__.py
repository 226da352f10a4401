"""``python -m edgequal.agent.worker``: the worker process (main.py)."""

import sys

from .main import main

sys.exit(main())
