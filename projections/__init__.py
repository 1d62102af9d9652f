"""Projections: the folds (projections/folds) and the machinery that runs them: checkpointed
loops, catch-up, dead letters, lag, replay into a shadow schema. Imports only shared."""
