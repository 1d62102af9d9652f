"""Chaos experiments against real servers and real dbt; `python -m tests.support.chaos` runs them.

One module per family (runners, outages, projectors, concurrency), what they share in
harness, the order, counts and the table in suite.
"""
