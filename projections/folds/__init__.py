"""The folds: each turns its subjects' events into its tables, and nothing else. The machinery
that feeds them (checkpoints, dead letters, replay, lag) lives one level up, in projections."""
