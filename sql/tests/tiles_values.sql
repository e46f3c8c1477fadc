.load build/deltacells
-- oracle: same output
.headers on
-- one row per tile of --tile-cells 1000 cells, with its nonzeros; the filters agree with a native table
SELECT tile, first_cell, n_cells, nnz FROM tiles;
SELECT (SELECT sum(nnz) FROM tiles) AS nnz, (SELECT value FROM dc_meta WHERE key = 'nnz') AS meta_nnz,
       (SELECT value FROM dc_meta WHERE key = 'n_tiles') AS n_tiles;
SELECT tile FROM tiles WHERE tile = '1';
SELECT tile FROM tiles WHERE tile > 0 ORDER BY tile DESC;
SELECT tile FROM tiles WHERE rowid BETWEEN 1 AND 1;
SELECT tile, nnz FROM tiles WHERE tile >= 1 AND tile < 3 ORDER BY tile;
SELECT tile FROM tiles WHERE tile IN (0, 2, 5, '1', 1.5) ORDER BY tile;
SELECT count(*) FROM tiles WHERE tile = 'x' OR tile < -1 OR tile > 2.5;
