"""The one unit rule for durations, shared by the terminal and the pages."""

from __future__ import annotations

from edgequal.host.present.units import duration_text, figure_text, scaled_text, table_unit


def test_a_single_duration_takes_the_unit_that_suits_it():
    assert duration_text(0.1411) == "141.1 µs"
    assert duration_text(0.00199) == "2.0 µs"
    assert duration_text(12.5) == "12.50 ms"
    assert duration_text(106.4) == "106 ms"
    assert duration_text(None) == "—"


def test_a_table_takes_one_unit_from_its_medians():
    assert table_unit([0.0246, 0.0696, None]) == ("µs", 1000.0)
    assert table_unit([0.0246, 2.5]) == ("ms", 1.0)  # one slow model: all in ms
    assert table_unit([None]) == ("ms", 1.0)
    assert [scaled_text(v, 1000.0) for v in (0.00199, 0.0246, 0.1496)] == ["1.99", "24.6", "150"]
    assert scaled_text(None, 1.0) == "—"


def test_compare_figures_use_the_same_rule():
    assert figure_text(0.0246, "ms") == "24.6 µs"
    assert figure_text(365.2, "ms") == "365 ms"
    assert figure_text(0.21234, "") == "0.2123"
    assert figure_text(3, "") == "3"
    assert figure_text(79.95, "°C") == "79.95 °C"
    assert figure_text(None, "ms") == "—"
