"""Fixtures for the lab tests: a real PostgreSQL server for the history database."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def postgres_url(test_helper):
    """The URL of a real PostgreSQL server (tests/postgres.py) for this test session.

    Skipped with the reason when the PostgreSQL binaries are absent; in CI ($CI set)
    that is an error, because .ci/run installs them.
    """
    helpers = test_helper("postgres")
    bin_dir = helpers.find_bin_dir()
    if bin_dir is None:
        reason = "PostgreSQL not found (no initdb): install postgresql to run these tests"
        if os.environ.get("CI"):
            pytest.fail(reason + " ($CI is set, so this is an error)")
        pytest.skip(reason)
    server = helpers.start_postgres(bin_dir)
    try:
        yield server.url
    finally:
        server.stop()
