"""The dbt-process layer: one dbt invocation started sealed through a warm fork server,
contained (namespaces, cgroup, sandbox uid) and streamed. Nothing here knows what a run means;
it runs dbt and reports its lines."""
