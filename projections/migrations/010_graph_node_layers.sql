-- Where the viewer draws a model, seed or snapshot of a large graph: the column of its
-- topological generation in the whole graph and its place in that column, computed once
-- when the graph is folded (a graph never changes), never on a read. NULL for the nodes
-- not drawn (tests, sources, ...) and for graphs folded before this column existed (a
-- replay fills them in; the viewer lays such a graph out itself).
ALTER TABLE graph_nodes ADD COLUMN IF NOT EXISTS layer integer;
ALTER TABLE graph_nodes ADD COLUMN IF NOT EXISTS layer_row integer;
