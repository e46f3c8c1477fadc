.load build/deltacells
.headers on
-- one row per tile, consistent with the shadow table and dc_meta
SELECT tile, first_cell, n_cells, nnz, bytes > 0 AS has_bytes, chunks FROM tiles;
SELECT count(*) AS consistent FROM tiles t JOIN tiles_data d USING (tile)
 WHERE t.bytes = length(d.data) AND t.nnz = d.nnz AND t.first_cell = d.first_cell;
SELECT (SELECT sum(nnz) FROM tiles) = (SELECT value FROM dc_meta WHERE key = 'nnz') AS nnz_matches;
SELECT tile FROM tiles WHERE tile = '1';
SELECT tile FROM tiles WHERE tile > 0 ORDER BY tile DESC;
SELECT tile FROM tiles WHERE rowid BETWEEN 1 AND 1;
EXPLAIN QUERY PLAN SELECT * FROM tiles WHERE tile = 1;
EXPLAIN QUERY PLAN SELECT * FROM tiles WHERE tile >= 1 AND tile < 3 ORDER BY tile;
EXPLAIN QUERY PLAN SELECT * FROM tiles;
-- shadow tables are read-only to SQL in defensive mode (xShadowName)
.dbconfig defensive on
UPDATE tiles_data SET nnz = 0;
