-- Which runs built a relation (the viewer's relation page, GET /v1/relations/{key}).
CREATE INDEX IF NOT EXISTS run_nodes_by_relation ON run_nodes (relation, finished_at DESC)
    WHERE relation IS NOT NULL;
