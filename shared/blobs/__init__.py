"""Blobs and digests: content named by its digest, what grows with a project and travels beside its
event, and dbt's artifacts a run keeps."""
