-- Which runs built a node (the relation page: GET /v1/relations/{key} lists them).
CREATE INDEX IF NOT EXISTS run_nodes_by_node ON run_nodes (unique_id, finished_at DESC);
