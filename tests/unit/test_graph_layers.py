"""Where the viewer draws a large graph's nodes: columns by topological generation."""

from jetdbt.projections.graph.layers import layers


def test_a_node_sits_one_column_right_of_its_latest_parent():
    edges = [("a", "b"), ("b", "d"), ("a", "d"), ("c", "d"), ("d", "test_d")]
    assert layers(["d", "c", "b", "a"], edges) == {
        "a": (0, 0), "c": (0, 1), "b": (1, 0), "d": (2, 0),
    }  # fmt: skip


def test_a_cycle_places_nothing_and_the_viewer_lays_the_graph_out_itself():
    assert layers(["a", "b"], [("a", "b"), ("b", "a")]) == {}
