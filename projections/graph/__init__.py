"""The graph projection: each version's nodes, edges, column lineage and the relations runs write,
and the reads of graphs, relations and overlaps."""
