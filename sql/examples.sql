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

-- per-cell expression
SELECT cell_id, length(genes) / 4 AS n_genes FROM expression WHERE cell_id IN (SELECT cell_id FROM cells WHERE cell_type = 'NK' LIMIT 3);

-- expression_long holds the NONZERO counts only (one row per cell and expressed gene), so
-- avg(e.count) over it is the mean over the cells that express the gene, not the mean of the
-- group.  The mean including zeros, the fraction expressing and pseudobulk sums come from
-- dc_aggregate(group_by [, cells [, genes]]), computed in C in one pass over the tiles.
-- Here gene_id 200 (the 201st by total counts) per cell type; on real data use a name, e.g. '["CD3E"]'.
SELECT label AS cell_type, gene, n_cells, sum, round(mean, 4) AS mean_with_zeros, n_expressing,
       round(frac_expressing, 4) AS frac_expressing
  FROM dc_aggregate('cell_type', NULL, json_array((SELECT name FROM genes WHERE gene_id = 200)));
-- the same mean written by hand: the sum over the nonzeros divided by ALL the group's cells
SELECT c.cell_type, round(sum(e.count) * 1.0 / (SELECT count(*) FROM cells c2 WHERE c2.cell_type = c.cell_type), 4)
       AS mean_with_zeros, round(avg(e.count), 4) AS avg_over_expressing_only
  FROM expression_long e JOIN cells c USING (cell_id) WHERE e.gene_id = 200 GROUP BY c.cell_type;
-- top 5 genes of NK by mean (with zeros), and a selection of cells (as for dc_batch)
SELECT gene, round(mean, 3) AS mean, round(frac_expressing, 3) AS frac FROM dc_aggregate('cell_type')
 WHERE label = 'NK' ORDER BY mean DESC LIMIT 5;
-- (the gene with the largest total: genes are numbered by decreasing counts, so gene_id 0)
SELECT label AS donor, gene, round(mean_log1p_cpm, 4) AS mean_log1p_cpm
  FROM dc_aggregate('donor', (SELECT json_group_array(cell_id) FROM cells WHERE cell_type = 'NK'),
                    (SELECT json_array(name) FROM genes WHERE gene_id = 0))
 LIMIT 3;

-- settings
SELECT dc_config('threads'), dc_config('cache_mb');
