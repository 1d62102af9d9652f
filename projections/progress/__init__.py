"""The progress projection: runs and their nodes as they go, folded from run and node events, and
read as the API's runs, nodes and projects."""
