"""The terminal summary: summary.py (entry points, progress, errors), sections.py (the
sections of a qualification summary) and scenarios.py (service scenarios). The only package
that imports rich, and only when something is shown."""
