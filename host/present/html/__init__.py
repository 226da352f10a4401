"""Self-contained HTML pages (no script, nothing fetched): report.py assembles a report's
page from parts.py (escaping, tables, style, figure to PNG), plots.py, sections.py,
scenarios.py and conditions.py; matrix.py draws a fleet run's page; trend.py the history
trend page. matplotlib is imported here only."""
