"""The egress gate: the one way out a sandboxed run has for HTTP(S), and what it lets through."""
