"""The freshness projection: each source's last freshness check."""
