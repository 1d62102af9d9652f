"""What every service imports, in rooms: `bus` (the connection and its vocabulary), `blobs`
(content by digest), `identity` (who may do what), `project` (a deployed project and how a run
builds it), `runs` (what a run is and says), `jobs` (saved jobs, schedules, webhooks),
`process` (settings, logs, supervision) and `wording` (how values read). Imports nothing of
jetdbt outside itself."""
