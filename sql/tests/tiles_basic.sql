.load build/deltacells
.headers on
ATTACH 'build/fixtures/small.oracle.db' AS o;
-- the stored size and the chunks of each tile (up to 8, at least 512 cells each: these 1,000-cell tiles have 2)
SELECT tile, bytes > 0 AS has_bytes, chunks FROM tiles;
-- consistent with the shadow table tiles_data, and the cells and nonzeros are the oracle's
SELECT count(*) AS consistent FROM tiles t JOIN tiles_data d USING (tile) JOIN o.tiles u USING (tile)
 WHERE t.bytes = length(d.data) AND t.chunks = d.chunks AND t.nnz = d.nnz AND t.first_cell = d.first_cell
   AND t.n_cells = d.n_cells AND d.first_cell = u.first_cell AND d.n_cells = u.n_cells AND d.nnz = u.nnz;
SELECT (SELECT count(*) FROM tiles) = (SELECT count(*) FROM o.tiles) AS same_count;
EXPLAIN QUERY PLAN SELECT * FROM tiles WHERE tile = 1;
EXPLAIN QUERY PLAN SELECT * FROM tiles WHERE tile >= 1 AND tile < 3 ORDER BY tile;
EXPLAIN QUERY PLAN SELECT * FROM tiles;
-- shadow tables are read-only to SQL in defensive mode (xShadowName)
.dbconfig defensive on
UPDATE tiles_data SET nnz = 0;
