"""Judging verified reports: policies, the gate and its checks, baselines and regression
statistics, compare, JUnit, and reading a report file. Pure of terminals and pages."""
