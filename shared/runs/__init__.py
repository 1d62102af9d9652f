"""What a run is and says: its status words, its nodes' outcomes and which nodes it plans, its
graph, the relations it writes, its log and where a person opens it."""
