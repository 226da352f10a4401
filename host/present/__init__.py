"""Showing reports to people: the terminal summary (terminal/, the only place rich is
imported) and the self-contained HTML pages with their plots (html/: report, fleet matrix,
trend)."""
