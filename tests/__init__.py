"""The suite: tests/unit (no servers), tests/stack (one running stack), tests/dbt (real dbt
runs), tests/properties (fuzzed); what they share lives in tests/support."""
