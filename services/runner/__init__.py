"""The runner: consumes commands, runs dbt, publishes events. It only publishes: it imports
shared and nothing from projections, the API or any other service."""
