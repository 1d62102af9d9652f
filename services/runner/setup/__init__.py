"""Job setup: everything an invocation needs before it starts (the descriptor, the plan, the
selection, the deferral state, the job's directory and rendered profiles). Pure preparation:
nothing here publishes."""
