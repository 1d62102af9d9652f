"""Who may do what: API tokens, NATS users per role, and the local trust of a one-machine stack."""
