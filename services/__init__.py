"""jetdbt's services. Each room imports only what is below it: shared below everything;
projections and the runner beside each other, never importing one another; the API above
projections; the notifier, MCP door and triggers above the API; the stack and the CLI on top.
tests/unit/test_layering.py holds the rule."""
