"""What every service imports: the bus and its vocabulary (subjects, streams, events), settings,
identity, digests. Imports nothing of jetdbt outside itself."""
