"""The attempt kinds: one attempt's life (prepare, start, invoke, finish) and each kind of it
(deploy, parse, build, dbt retry, in-run node retry). Each kind publishes its own events and
ends its run exactly once."""
