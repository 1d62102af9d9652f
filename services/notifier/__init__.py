"""The notifier: webhooks of projects and jobs, told of runs' starts and ends.

A consumer of events (its own durable consumer `notifier` of DBT_EVENTS, streams.yaml)
that posts signed JSON to each hook listening, retries with backoff, and records every
attempt as a fact (`hook.delivery.v1`). Not part of the runner: it never runs dbt.
"""
