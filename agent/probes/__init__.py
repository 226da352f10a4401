"""Device probes: thermal zones, cpufreq, Raspberry Pi firmware, Jetson power state, fingerprint.

Each probe reads files under a root path (``/`` on a device, a recorded tree in tests,
the device emulator's tree) and hands their text to a pure parser. Absent sensors
are reported as absent, never guessed.

Board families (``contract/board_families.py``: Raspberry Pi, Jetson) are found through
:func:`registry.board_probes`: each family's module here, named as the family, brings its
``read_<name>`` and ``fingerprint_section``; ``info`` and the fingerprint take every
family from it, and name none.
"""

from __future__ import annotations

import os

from edgequal.agent.config import probe_root


def read_all(root: str | os.PathLike | None = None) -> dict:
    """The fingerprint plus every probe's reading, for ``edgequal-agent info``.

    Returns ``{"root", "fingerprint", "thermal", "cpufreq", <each board family>,
    "power"}`` (the families: ``raspberry_pi``, ``jetson``); a probe that does not apply
    has ``available: False`` and a ``reason`` (power: ``present: False`` and the reason,
    never an estimate).
    """
    from edgequal.agent.probes.cpufreq import read_cpufreq
    from edgequal.agent.probes.fingerprint import fingerprint
    from edgequal.agent.probes.power import read_power
    from edgequal.agent.probes.registry import board_probes
    from edgequal.agent.probes.thermal import read_thermal

    root = probe_root(root)
    cpufreq = read_cpufreq(root)
    boards = {probe.name: probe.read(root) for probe in board_probes()}
    return {
        "root": str(root),
        "fingerprint": fingerprint(root, cpufreq=cpufreq, boards=boards),
        "thermal": read_thermal(root),
        "cpufreq": cpufreq,
        **boards,
        "power": read_power(root),
    }
