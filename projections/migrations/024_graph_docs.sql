-- Each graph node and edge as the JSON a graph page serves, made once when it is stored (a
-- stored graph never changes) instead of on every read: at 5,000 models building the
-- page's 6,000 node objects and 10,000 edge objects was most of its first answer
-- (bench/bench_scale.py). What changes after (a source's freshness, the catalog's types,
-- declared writes) is empty here and set on the read.
-- json_build_object is only stable because some types print by settings; these columns'
-- types (text, boolean, integer, text[], jsonb) do not, so the functions may say immutable,
-- as a generated column needs. Adding the columns fills them for the graphs already stored.
-- A stored doc is not made again when a function is replaced: a change to one drops its
-- column and adds it again (or the API reads the old shape). The node's code and
-- description are kept twice for it: a graph's rows about double in size.
CREATE OR REPLACE FUNCTION graph_node_doc(
    unique_id text, resource_type text, name text, package text, relation text,
    owned boolean, materialized text, tags text[], description text, columns jsonb,
    column_schema jsonb, test_severity text, test_kind text, attached_node text,
    raw_code text, layer integer, layer_row integer
) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT json_build_object(
        'unique_id', unique_id, 'resource_type', resource_type, 'name', name,
        'package', package, 'relation', relation, 'owned', owned,
        'materialized', materialized, 'tags', tags, 'description', description,
        'columns', columns, 'column_schema', column_schema, 'test_severity', test_severity,
        'test_kind', test_kind, 'attached_node', attached_node, 'raw_code', raw_code,
        'layer', layer, 'row', layer_row,
        'declared_writes', '[]'::json, 'freshness', NULL::json, 'catalog', NULL::json
    )::text
$$;
ALTER TABLE graph_nodes ADD COLUMN IF NOT EXISTS doc text GENERATED ALWAYS AS (
    graph_node_doc(
        unique_id, resource_type, name, package, relation, owned, materialized, tags,
        description, columns, column_schema, test_severity, test_kind, attached_node,
        raw_code, layer, layer_row
    )
) STORED;
CREATE OR REPLACE FUNCTION graph_edge_doc(parent text, child text, kind text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT json_build_object('parent', parent, 'child', child, 'kind', kind)::text
$$;
ALTER TABLE graph_edges ADD COLUMN IF NOT EXISTS doc text GENERATED ALWAYS AS (
    graph_edge_doc(parent, child, kind)
) STORED;
