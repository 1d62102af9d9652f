"""Where the viewer draws a large graph: each model, seed and snapshot in the column of its
topological generation (networkx), in id order within it.

Laying 500 nodes out in the browser costs a run page a fifth of its first paint; the
generations of a stored graph never change, so the graph fold computes them once, as it
stores the graph, and a page only reads them (at 5,000 models they cost a first read
more than all of its queries).
"""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx

__all__ = ["PRODUCING", "layers"]

# The nodes that produce a relation: a run page draws these, each test folded into one.
PRODUCING = ("model", "seed", "snapshot")


def layers(nodes: Iterable[str], edges: Iterable[tuple[str, str]]) -> dict[str, tuple[int, int]]:
    """Each node's (generation, place in it) in the graph of `nodes` and the `edges` between
    them (others are ignored); none when they hold a cycle, which dbt never stores."""
    dag = nx.DiGraph()
    dag.add_nodes_from(nodes)
    dag.add_edges_from((p, c) for p, c in edges if p in dag and c in dag)
    try:
        generations = list(nx.topological_generations(dag))
    except nx.NetworkXUnfeasible:
        return {}
    return {
        node: (layer, row)
        for layer, generation in enumerate(generations)
        for row, node in enumerate(sorted(generation))
    }
