"""Machine changes and the lab's groups, on signed nightly reports recorded into a real
SQLite history (tests/signed_nights.py): a change only the machine moved with is shown and
recorded, not failed in the fleet's JUnit unless the lab says so; the changes of one night
on several boards are one group named by the fields they share, a change on one board
alone is that board's; ``history changes --html`` draws them, checked in headless Chromium
at 1280 px."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from edgequal.cli.main import main as edgequal_main

WOBBLE = [1.0, 1.012, 0.991, 1.006, 0.995, 1.009, 0.988, 1.003]
"""Night-to-night spread (±1.2 %), repeated: the same every run of the suite."""


def _p50(n: int, base: float) -> float:
    return round(base * WOBBLE[n % len(WOBBLE)], 4)


def _lab(tmp_path, boards, changes: str = "", lab_lines: str = "") -> object:
    from edgequal.host.lab.inventory import load_lab

    path = tmp_path / "lab.toml"
    path.write_text(
        '[lab]\nname = "nightly"\n'
        + lab_lines
        + "".join(f'[devices.{b}]\naddress = "grpc://127.0.0.1:1"\n' for b in boards)
        + changes
    )
    return load_lab(path)


def _silero(nights, last: int) -> dict:
    """The observed case: an unchanged export on agent-1, its p50 15 % slower from night 7
    while other processes' CPU use went 0.2 → 1.0 (nothing recorded changed); beside it
    agent-2, the same step with the machine as quiet as before."""
    table = {}
    for n in range(last + 1):
        busy = n >= 7
        table[(n, "agent-1")] = nights.Night(
            p50_ms=_p50(n, 11.5 if busy else 10.0), other_cpus=(1.0 if busy else 0.2) + n / 1000
        )
        table[(n, "agent-2")] = nights.Night(
            p50_ms=_p50(n + 3, 11.5 if busy else 10.0), other_cpus=0.2 + (n % 3) / 100
        )
    return table


@pytest.mark.slow  # the detector's permutations over four histories: a few CPU-seconds
def test_a_change_only_the_machine_moved_with_is_shown_not_failed(tmp_path, test_helper, capsys):
    from edgequal.host.lab.changes import change_settings
    from edgequal.host.lab.fleet_changes import report_fleet_changes
    from edgequal.host.lab.history import History

    nights = test_helper("signed_nights")
    boards = [nights.Board("agent-1", "generic/linux-x86_64"),
              nights.Board("agent-2", "generic/linux-x86_64")]  # fmt: skip
    # The fleet run of night 10: the first whose history shows the night-7 change at p 0.01
    # (7 runs against 3 reach p 0.025 at best; against 4, 0.005).
    db = f"sqlite:///{tmp_path / 'history.sqlite'}"
    nights.record_nights(db, tmp_path / "r", boards, _silero(nights, 10))
    for fail_on_machine, name in ((False, "default"), (True, "strict")):
        lab = _lab(
            tmp_path, ["agent-1", "agent-2"],
            "[changes]\nfail_on_machine = true\n" if fail_on_machine else "",
        )  # fmt: skip
        out = tmp_path / name
        out.mkdir()
        (out / "junit.xml").write_text('<?xml version="1.0"?>\n<testsuites/>\n')
        history = History.open(db)
        settings = change_settings(lab)
        new = report_fleet_changes(history, lab, nights.fleet_run(10), settings, out, out)
        history.close()
        causes = {c.device: (c.figure, c.index, c.cause, c.worse) for c in new}
        assert causes == {
            "agent-1": ("p50 x=1x16", 7, "machine", True),
            "agent-2": ("p50 x=1x16", 7, "unexplained", True),
        }
        (suite,) = ET.parse(out / "junit.xml").getroot()
        cases = {c.get("name"): c for c in suite.findall("testcase")}
        machine = cases["det p50 x=1x16 on agent-1"]
        unexplained = cases["det p50 x=1x16 on agent-2"]
        assert unexplained.find("failure").get("type") == "Change"
        if fail_on_machine:
            assert suite.get("failures") == "2"
            assert machine.find("failure").get("type") == "MachineChange"
        else:  # shown (its case, its headline), recorded (the gauge), not failed
            assert suite.get("failures") == "1" and machine.find("failure") is None
            text = machine.find("system-out").text
            assert text.startswith("machine change, not failed")
            assert "a machine change (other processes' CPU use 0.20 → 1.01 CPUs)" in text
        prom = (out / "changes.prom").read_text()
        for device in ("agent-1", "agent-2"):
            assert (
                f'edgequal_change_detected{{device="{device}",model="det",preset="quick",'
                'figure="p50 x=1x16"} 1'
            ) in prom
    # All 24 nights, as history changes reads them: the one p50 change of agent-1 is at
    # night 7, a machine change, and says what moved with it.
    db24 = f"sqlite:///{tmp_path / 'history-24.sqlite'}"
    nights.record_nights(db24, tmp_path / "r24", boards, _silero(nights, 23))
    capsys.readouterr()
    assert edgequal_main(["history", "changes", "--db", db24, "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    [c] = [c for c in found["changes"] if c["device"] == "agent-1"]
    assert (c["figure"], c["index"], c["cause"], c["culprit"]) == ("p50 x=1x16", 7, "machine", [])
    assert 1.12 < c["ratio"] < 1.18 and c["n_before"] == 7 and c["n_after"] == 17
    moved = {m["signal"]: m for m in c["machine"]}
    assert moved["other_cpus"]["moved_with"] and moved["other_cpus"]["separation"] == 1.0
    assert not moved["clean_share"]["moved_with"] and not moved["bare_import_ms"]["moved_with"]
    capsys.readouterr()
    assert edgequal_main(["history", "changes", "--db", db24]) == 0
    notes = " ".join(capsys.readouterr().err.split())
    assert (
        "nothing recorded changed there: a machine change (other processes' CPU use 0.20 → "
        "1.0" in notes
    )
    assert "agent-1 alone of 2 generic/linux-x86_64 boards, night 8" in notes


def _lab_nights(nights) -> dict:
    """Three raspberry-pi/5 boards whose kernel went 6.6.31 → 6.6.51 at night 8 (p50 20 %
    slower on each) and a raspberry-pi/4b whose p50 rose 30 % at night 5 with nothing
    recorded and the machine as before; 14 nights each."""
    table = {}
    for n in range(14):
        for i, board in enumerate(("pi5-a", "pi5-b", "pi5-c")):
            new = n >= 8
            table[(n, board)] = nights.Night(
                p50_ms=_p50(n + i, 12.0 if new else 10.0), kernel="6.6.51" if new else "6.6.31"
            )
        table[(n, "pi4-a")] = nights.Night(p50_ms=_p50(n + 5, 26.0 if n >= 5 else 20.0))
    return table


@pytest.fixture
def lab_history(tmp_path, test_helper):
    nights = test_helper("signed_nights")
    boards = [nights.Board(b, "raspberry-pi/5") for b in ("pi5-a", "pi5-b", "pi5-c")]
    boards.append(nights.Board("pi4-a", "raspberry-pi/4b"))
    db = f"sqlite:///{tmp_path / 'history.sqlite'}"
    nights.record_nights(db, tmp_path / "r", boards, _lab_nights(nights))
    return {"db": db, "nights": nights}


@pytest.mark.slow  # the detector over four histories: a few CPU-seconds
def test_one_nights_changes_on_several_boards_are_one_group_named_by_what_they_share(
    lab_history, capsys
):
    from edgequal.host.lab.change_groups import group_changes
    from edgequal.host.lab.changes import find_changes
    from edgequal.host.lab.history import History

    history = History.open(lab_history["db"])
    found = find_changes(history.runs())
    history.close()
    groups = group_changes(found)
    assert [g.headline() for g in groups] == [
        "3 of 3 raspberry-pi/5 boards, night 9 (2026-11-09): kernel 6.6.31 → 6.6.51",
        "pi4-a alone of 1 raspberry-pi/4b board, night 6 (2026-11-06): nothing recorded "
        "changed, and the machine did not move with it (that board's health)",
    ]
    kernel, alone = groups
    assert kernel.boards == ["pi5-a", "pi5-b", "pi5-c"] and not kernel.alone
    assert kernel.night == lab_history["nights"].fleet_run(8)
    assert [f["field"] for f in kernel.fields] == ["kernel"]
    assert {(c.device, c.figure, c.cause) for c in kernel.changes} == {
        (b, "p50 x=1x16", "recorded") for b in ("pi5-a", "pi5-b", "pi5-c")
    }
    assert alone.alone and alone.cause == "unexplained" and alone.boards == ["pi4-a"]
    # history changes --json has the groups; the terminal prints them.
    capsys.readouterr()
    assert edgequal_main(["history", "changes", "--db", lab_history["db"], "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["groups"]
    assert [(g["night_number"], g["boards"], g["alone"], g["cause"]) for g in listed] == [
        (9, ["pi5-a", "pi5-b", "pi5-c"], False, "recorded"),
        (6, ["pi4-a"], True, "unexplained"),
    ]
    assert listed[0]["kinds"] == {"raspberry-pi/5": {"boards": 3, "of": 3}}
    assert listed[0]["fields"] == [
        {"field": "kernel", "category": "kernel", "before": "6.6.31", "after": "6.6.51"}
    ]
    assert edgequal_main(["history", "changes", "--db", lab_history["db"]]) == 0
    out = " ".join(capsys.readouterr().err.split())
    assert "3 of 3 raspberry-pi/5 boards, night 9 (2026-11-09): kernel 6.6.31 → 6.6.51" in out


@pytest.mark.slow  # headless Chromium and two pages with figures
def test_the_labs_changes_page_in_chromium_at_1280_px(lab_history, tmp_path, chromium, capsys):
    binary = chromium.find_chromium()
    page = tmp_path / "changes.html"
    argv = ["history", "changes", "--db", lab_history["db"], "--html", str(page)]
    assert edgequal_main(argv) == 0
    assert f"changes page: {page}" in capsys.readouterr().err
    html = page.read_text()
    trend = tmp_path / "changes-trend.html"
    trend_html = trend.read_text()
    # The latest night's group first, each change linking its series on the trend page.
    first, second = (html.index(t) for t in ("3 of 3 raspberry-pi/5", "pi4-a alone of 1"))
    assert first < second
    links = re.findall(r'href="changes-trend\.html#([^"]+)"', html)
    assert len(links) == 4
    for anchor in links:
        assert f'id="{anchor}"' in trend_html, anchor
    assert "<script" not in html and not re.search(r"""(src|href)=["']?(https?:|//)""", html)
    layout = chromium.layout_at(binary, page, tmp_path, width=1280)
    assert layout["viewport"] == 1280 or layout["viewport"] > 1200, layout
    assert layout["scroll_width"] <= layout["viewport"], layout
    assert layout["wide"] == [], layout
    dom = chromium.headless(binary, tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count('<section class="group') == 2
    assert "kernel 6.6.31 → 6.6.51" in dom.stdout and "that board's health" in dom.stdout


@pytest.mark.slow  # the detector over two histories, three commands, one trend figure
def test_one_p_value_for_history_changes_history_trend_and_fleet_run(tmp_path, test_helper, capsys):
    """A change at p 0.025 (7 runs against 3): the lab's [changes] p_value = 0.05 finds it
    in fleet run's JUnit, history changes --lab and the trend page of history trend --lab;
    the default 0.01 finds it in none; --p-value sets it on each command; a policy may not."""
    from edgequal.host.lab.changes import change_settings
    from edgequal.host.lab.fleet_changes import report_fleet_changes
    from edgequal.host.lab.history import History

    nights = test_helper("signed_nights")
    boards = [nights.Board("agent-1", "generic/linux-x86_64"),
              nights.Board("agent-2", "generic/linux-x86_64")]  # fmt: skip
    db = f"sqlite:///{tmp_path / 'history.sqlite'}"
    (tmp_path / "db-url").write_text(db)
    (tmp_path / "db-url").chmod(0o600)  # a URL may hold a password: the file is private
    lab = _lab(
        tmp_path, ["agent-1", "agent-2"], "[changes]\np_value = 0.05\n",
        f'history_url_file = "{tmp_path / "db-url"}"\n',
    )  # fmt: skip
    # Night by night from night 7, as fleet run records and then looks (its new changes,
    # its JUnit): at the lab's p 0.05 each board's change is new on one night; at 0.01 (the
    # old default of the trend page), on none.
    table = _silero(nights, 9)
    nights.record_nights(db, tmp_path / "r", boards, {k: v for k, v in table.items() if k[0] < 7})
    new: dict[str, list] = {"0.05": [], "0.01": []}
    for n in range(7, 10):
        tonight = {k: v for k, v in table.items() if k[0] == n}
        nights.record_nights(db, tmp_path / "r", boards, tonight)
        for p in new if n == 9 else ["0.05"]:
            out = tmp_path / f"night-{n}-{p}"
            out.mkdir()
            (out / "junit.xml").write_text('<?xml version="1.0"?>\n<testsuites/>\n')
            history = History.open(db)
            settings = change_settings(lab, p_value=float(p))
            found = report_fleet_changes(history, lab, nights.fleet_run(n), settings, out)
            history.close()
            new[p] += [(n, c.device, c.p_value) for c in found]
    assert new["0.01"] == []
    assert sorted(d for _, d, _ in new["0.05"]) == ["agent-1", "agent-2"], new
    assert all(7 <= n <= 9 and 0.01 < p <= 0.05 for n, _, p in new["0.05"]), new

    def changes(*argv) -> list:
        capsys.readouterr()
        assert edgequal_main(["history", "changes", "--json", *argv]) == 0
        return [(c["device"], c["index"]) for c in json.loads(capsys.readouterr().out)["changes"]]

    assert changes("--lab", str(lab.path)) == [("agent-1", 7), ("agent-2", 7)]
    assert changes("--db", db) == []  # the default p 0.01
    assert changes("--db", db, "--p-value", "0.05") == [("agent-1", 7), ("agent-2", 7)]
    assert changes("--lab", str(lab.path), "--p-value", "0.01") == []

    page = tmp_path / "trend.html"
    argv = ["history", "trend", "--lab", str(lab.path), "--device", "agent-1"]
    assert edgequal_main([*argv, "--html", str(page)]) == 0
    assert f"trend page: {page} (p ≤ 0.05)" in capsys.readouterr().err
    assert page.read_text().count('<ul class="change-points">') == 1
    assert edgequal_main([*argv, "--p-value", "0.01", "--html", str(page)]) == 0
    assert '<ul class="change-points">' not in page.read_text()
    # A policy's [changes] may set minimum effects, not the p-value: one line, exit 2.
    policy = tmp_path / "gate.toml"
    policy.write_text('name = "g"\n[changes]\np_value = 0.05\n')
    capsys.readouterr()
    assert edgequal_main(["history", "changes", "--db", db, "--policy", str(policy)]) == 2
    err = capsys.readouterr().err
    assert "changes.p_value is the lab's setting, not a policy's" in err and "--p-value" in err
    # A bad --p-value is refused before anything runs (fleet run contacts no board).
    bad = (["history", "changes", "--db", db], ["fleet", "run", str(lab.path), "--models", "m"])
    for argv in bad:
        with pytest.raises(SystemExit) as refused:  # argparse's refusal, one line
            edgequal_main([*argv, "--p-value", "1.5"])
        assert refused.value.code == 2
        err = capsys.readouterr().err
        assert "argument --p-value: must be between 0 and 1, got 1.5" in err
        assert len(err.strip().splitlines()) == 1
