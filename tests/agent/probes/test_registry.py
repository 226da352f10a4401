"""Board families reach ``info`` and the fingerprint through ``registry.board_probes()`` alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from edgequal.agent.probes import read_all
from edgequal.agent.probes.fingerprint import fingerprint
from edgequal.agent.probes.registry import board_probes
from edgequal.contract.board_families import BOARD_FAMILY_NAMES, board_family

SYSFS = Path(__file__).resolve().parents[2] / "fixtures" / "sysfs"


def test_every_family_has_a_probe_module():
    assert tuple(p.name for p in board_probes()) == BOARD_FAMILY_NAMES
    assert [p.read.__name__ for p in board_probes()] == ["read_raspberry_pi", "read_jetson"]


@pytest.mark.parametrize(
    ("tree", "family"), [("pi5", "raspberry_pi"), ("jetson-orin-nano", "jetson")]
)
def test_a_boards_section_holds_the_fields_its_family_declares(tree, family, board_tools):
    board_tools(tree)
    fp = fingerprint(SYSFS / tree)
    assert tuple(fp[family]) == tuple(board_family(family).fields)
    others = set(BOARD_FAMILY_NAMES) - {family}
    assert not others & set(fp)
    # info's readings, passed in, give the same section as the fingerprint reads alone.
    info = read_all(SYSFS / tree)
    assert info[family]["available"] is True
    assert info["fingerprint"][family] == fp[family]
    assert all(info[o]["available"] is False for o in others)


def test_no_family_on_a_plain_tree(tmp_path, board_tools):
    board_tools(None)
    fp = fingerprint(tmp_path)
    assert not set(BOARD_FAMILY_NAMES) & set(fp)
    assert not [k for k in fp["absent"] if k.split(".")[0] in BOARD_FAMILY_NAMES]
