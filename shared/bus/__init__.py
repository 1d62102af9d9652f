"""The bus and its vocabulary: the NATS connection, subject names, the streams and their contract,
the events and commands they carry, and reading them back."""
