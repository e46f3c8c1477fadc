-- deltacells: SQL examples.  Run from the repo root:
--   sqlite3 DATASET.dcdb < sql/examples.sql
.load build/deltacells
.headers on
.mode column

-- cells per cell type
SELECT cell_type, count(*) FROM cells GROUP BY cell_type;

-- metadata filters are pushed down to the stored blocks (see the plan)
SELECT count(*) FROM (SELECT cell_id FROM cells WHERE cell_type IN ('B cell','NK') AND percent_mt < 5 LIMIT 100);
SELECT group_concat(cell_id, ' ') AS first_ten FROM (SELECT cell_id FROM cells WHERE cell_type IN ('B cell','NK') AND percent_mt < 5 LIMIT 10);
EXPLAIN QUERY PLAN SELECT cell_id FROM cells WHERE cell_type IN ('B cell','NK') AND percent_mt < 5;

-- the tiles and the genes
SELECT * FROM tiles;
SELECT name FROM genes ORDER BY gene_id LIMIT 10;

-- a batch of cells decoded into CSR blobs by the threaded decoder
SELECT n_cells, length(indices) FROM dc_batch((SELECT json_group_array(cell_id) FROM cells WHERE cell_type = 'NK'));

-- per-cell expression, and the long form joined with the metadata: the mean count of the
-- most expressed gene (gene_id 0) per cell type.  On real data pick a gene by name, e.g.
--   WHERE e.gene_id = (SELECT gene_id FROM genes WHERE name = 'CD3E')
SELECT cell_id, length(genes) / 4 AS n_genes FROM expression WHERE cell_id IN (SELECT cell_id FROM cells WHERE cell_type = 'NK' LIMIT 3);
SELECT (SELECT name FROM genes WHERE gene_id = 0) AS gene, c.cell_type, round(avg(e.count), 2) AS mean_count
  FROM expression_long e JOIN cells c USING (cell_id) WHERE e.gene_id = 0 GROUP BY c.cell_type;

-- settings
SELECT dc_config('threads'), dc_config('cache_mb');
