"""Projections: one package per read model (`progress/`, `graph/`, `jobs/`, ...), each holding
its fold, its answers (the Structs the API serves) and its queries; beside them the machinery
that runs the folds: checkpointed loops, catch-up, dead letters, lag, replay into a shadow
schema. Imports only shared."""
