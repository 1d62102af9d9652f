"""The deploys projection: each deploy's outcome and the version it made, and its reads."""
