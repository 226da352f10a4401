"""What host and agent both stand on: the typed plan, the golden-set format and input
contract, signing (in-toto, DSSE) and subjects, the nonce, digest and bundle-name rules,
the preemption rule, the report's types, exit codes and the base errors.

It imports nothing from ``edgequal.agent`` or ``edgequal.host`` (tests/test_dependencies.py),
and nothing heavier than numpy and cryptography, so a 1 GB board carries it with the agent.
"""

__version__ = "0.1.0"
"""The version of edgequal, host and agent alike (what ``--version`` and Info report)."""
