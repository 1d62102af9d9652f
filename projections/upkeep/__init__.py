"""The projections' own bookkeeping as the API reads it: dead letters and stopped projections."""
