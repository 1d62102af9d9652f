"""Tests against one running stack (real NATS and Postgres, no dbt run), or its parts."""
