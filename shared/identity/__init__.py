"""Who may do what: principals, their teams, grants and tokens, and which teams may use each
warehouse."""
