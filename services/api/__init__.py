"""The query API: reads projections over HTTP, and turns a few writes into commands on the bus.
Imports shared and projections, never the runner."""
