"""The catalog projection: each node's columns as the warehouse said."""
