"""Tests that run real dbt on real projects through a running stack (marked `dbt`)."""
