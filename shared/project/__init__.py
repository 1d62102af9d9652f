"""A deployed project: the files its bundle holds, its descriptor, the version each slot runs, and
the environment, schemas and arguments a run builds with."""
