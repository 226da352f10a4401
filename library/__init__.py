"""edgequal as a library: the CLI is a thin layer over these names (docs/api.md).

    import edgequal
    with edgequal.connect("pi5") as dev:
        report = dev.qualify("model.onnx", golden="g.npz", plan="quick")
    result = edgequal.gate(report, policy="gate.toml")
    assert result, result.summary

Every name is loaded on first use (module ``__getattr__``): the agent on a 1 GB board
imports ``edgequal.agent``, which imports this package first, and must not pay for the
host's modules.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "connect": "edgequal.device",
    "Device": "edgequal.device",
    "SSHOptions": "edgequal.host.transport.ssh_options",
    "Report": "edgequal.report",
    "Latency": "edgequal.report",
    "NotMeasured": "edgequal.report",
    "NotMeasuredError": "edgequal.host.errors",
    "verify": "edgequal.judging",
    "gate": "edgequal.judging",
    "attest": "edgequal.judging",
    "export": "edgequal.judging",
    "GateResult": "edgequal.host.judge.gate",
    "Check": "edgequal.host.judge.checks",
    "Error": "edgequal.host.errors",
    "UsageError": "edgequal.host.errors",
    "VerificationFailed": "edgequal.host.errors",
    "UntrustedDevice": "edgequal.host.errors",
    "TransportError": "edgequal.host.errors",
    "DeviceBusy": "edgequal.host.errors",
}
_RENAMED = {"Error": "HostError"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'edgequal' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
