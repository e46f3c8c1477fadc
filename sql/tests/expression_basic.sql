.load build/deltacells
.headers on
-- expression, expression_long and dc_batch agree
SELECT cell_id, length(genes) / 4 = (SELECT count(*) FROM expression_long l WHERE l.cell_id = e.cell_id) AS agree
  FROM expression e WHERE cell_id IN (0, 999, 1000, 2999);
SELECT count(*) AS cells, sum(length(genes)) / 4 = (SELECT value FROM dc_meta WHERE key = 'nnz') AS all_nnz FROM expression;
SELECT count(*) = (SELECT n_cells FROM genes WHERE gene_id = 5) AS gene5_cells,
       sum(count) = (SELECT total_counts FROM genes WHERE gene_id = 5) AS gene5_total
  FROM expression_long WHERE gene_id = 5;
SELECT cell_id FROM expression WHERE cell_id BETWEEN 998 AND 1001.5;
SELECT cell_id FROM expression WHERE cell_id = '17';
EXPLAIN QUERY PLAN SELECT genes FROM expression WHERE cell_id IN (SELECT value FROM generate_series(1, 9));
EXPLAIN QUERY PLAN SELECT genes FROM expression WHERE cell_id = 3;
EXPLAIN QUERY PLAN SELECT * FROM expression WHERE cell_id >= 10 AND cell_id < 20 ORDER BY cell_id;
EXPLAIN QUERY PLAN SELECT avg(count) FROM expression_long WHERE gene_id = (SELECT gene_id FROM genes WHERE name = 'GENE1');
EXPLAIN QUERY PLAN SELECT * FROM expression_long WHERE cell_id = 4 AND gene_id IN (1, 2, 3);
