.load build/deltacells
-- oracle: same output
.headers on
-- per cell: its nonzeros, their sum, and the first gene ids and counts (int32 LE blobs)
SELECT cell_id, length(genes) / 4 AS n, length(counts) / 4 AS n_counts, hex(substr(genes, 1, 12)) AS genes,
       hex(substr(counts, 1, 12)) AS counts,
       (SELECT count(*) FROM expression_long l WHERE l.cell_id = e.cell_id) AS long_n,
       (SELECT sum(count) FROM expression_long l WHERE l.cell_id = e.cell_id) AS long_sum
  FROM expression e WHERE cell_id IN (0, 999, 1000, 2999);
SELECT count(*) AS cells, sum(length(genes)) / 4 AS nnz, (SELECT value FROM dc_meta WHERE key = 'nnz') AS meta_nnz
  FROM expression;
-- the genes table: numbered by decreasing total counts; its totals are those of the matrix
SELECT gene_id, name, total_counts, n_cells FROM genes ORDER BY gene_id LIMIT 4;
SELECT gene_id, name, total_counts, n_cells FROM genes ORDER BY gene_id DESC LIMIT 2;
SELECT count(*) AS gene5_cells, sum(count) AS gene5_total FROM expression_long WHERE gene_id = 5;
SELECT n_cells, total_counts FROM genes WHERE gene_id = 5;
-- ranges across the tile boundary at cell 1000, IN lists, text and real arguments
SELECT cell_id FROM expression WHERE cell_id BETWEEN 998 AND 1001.5;
SELECT cell_id, length(genes) FROM expression WHERE cell_id = '17';
SELECT gene_id, count(*), sum(count), max(count) FROM expression_long WHERE cell_id BETWEEN 995 AND 1004
 GROUP BY gene_id ORDER BY gene_id LIMIT 4;
SELECT cell_id, gene_id, count FROM expression_long WHERE cell_id = 4 AND gene_id IN (1, 2, 3, 1999) ORDER BY gene_id;
SELECT rowid, cell_id, gene_id, count FROM expression_long WHERE cell_id = 2999 ORDER BY gene_id DESC LIMIT 2;
SELECT round(avg(count), 6) FROM expression_long WHERE gene_id = (SELECT gene_id FROM genes WHERE name = 'GENE1');
