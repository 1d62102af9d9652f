"""A source with freshness thresholds whose data is old: the example's raw_orders, whose
newest order is from 2018, is stale by a day's threshold (warn) but not by a century's."""

from __future__ import annotations

from pathlib import Path

__all__ = ["SOURCE", "SOURCES", "add_stale_source"]

SOURCE = "source.jaffle_shop.shop.raw_orders"
SOURCES = """
version: 2
sources:
  - name: shop
    schema: "{{ target.schema }}"
    loaded_at_field: "cast(order_date as timestamp)"
    freshness:
      warn_after: {count: 1, period: day}
      error_after: {count: 36500, period: day}
    tables:
      - name: raw_orders
"""


def add_stale_source(project: Path) -> None:
    """Declare the stale source in a copy of the example project (its seeds must be loaded
    before a freshness check can read it)."""
    (project / "models" / "staging" / "sources.yml").write_text(SOURCES)
