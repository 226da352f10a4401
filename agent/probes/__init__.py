"""Device probes: thermal zones, cpufreq, Raspberry Pi firmware, Jetson power state, fingerprint.

Each probe reads files under a root path (``/`` on a device, a recorded tree in tests,
the device emulator's tree) and hands their text to a pure parser. Absent sensors
are reported as absent, never guessed.
"""

from __future__ import annotations

import os

from edgequal.agent.config import probe_root


def read_all(root: str | os.PathLike | None = None) -> dict:
    """The fingerprint plus every probe's reading, for ``edgequal-agent info``.

    Returns ``{"root", "fingerprint", "thermal", "cpufreq", "raspberry_pi", "jetson",
    "power"}``; a probe that does not apply has ``available: False`` and a ``reason``
    (power: ``present: False`` and the reason, never an estimate).
    """
    from edgequal.agent.probes.cpufreq import read_cpufreq
    from edgequal.agent.probes.fingerprint import fingerprint
    from edgequal.agent.probes.jetson import read_jetson
    from edgequal.agent.probes.power import read_power
    from edgequal.agent.probes.raspberry_pi import read_raspberry_pi
    from edgequal.agent.probes.thermal import read_thermal

    root = probe_root(root)
    cpufreq = read_cpufreq(root)
    pi = read_raspberry_pi(root)
    jet = read_jetson(root)
    return {
        "root": str(root),
        "fingerprint": fingerprint(root, cpufreq=cpufreq, raspberry_pi=pi, jetson=jet),
        "thermal": read_thermal(root),
        "cpufreq": cpufreq,
        "raspberry_pi": pi,
        "jetson": jet,
        "power": read_power(root),
    }
