.load build/deltacells
.headers on
ATTACH 'build/fixtures/small.oracle.db' AS o;
-- dc_aggregate against the oracle (native tables built from the h5ad): the sums and cells
-- expressing per (cell_type, gene) from the nonzeros, the group sizes from the cells, and the
-- means INCLUDING zeros (sum over all the group's cells, not avg() over the nonzeros).
WITH ref AS (SELECT c.cell_type AS label, e.gene_id, sum(e.count) AS s, count(*) AS nz
               FROM o.expression_long e JOIN o.cells c USING (cell_id) GROUP BY 1, 2),
     sizes AS (SELECT cell_type AS label, count(*) AS n FROM o.cells GROUP BY 1)
SELECT count(*) AS rows_,
       sum(a.n_cells = sizes.n) AS n_cells_ok,
       sum(a.sum = coalesce(ref.s, 0)) AS sum_ok,
       sum(a.n_expressing = coalesce(ref.nz, 0)) AS n_expressing_ok,
       sum(abs(a.mean - coalesce(ref.s, 0) * 1.0 / sizes.n) <= 1e-12 * a.mean) AS mean_ok,
       sum(a.frac_expressing = coalesce(ref.nz, 0) * 1.0 / sizes.n) AS frac_ok,
       sum(ref.s IS NULL) AS zero_rows
  FROM dc_aggregate('cell_type') a JOIN sizes USING (label)
  LEFT JOIN ref ON ref.label = a.label AND ref.gene_id = a.gene_id;
SELECT (SELECT count(*) FROM o.genes) * (SELECT count(DISTINCT cell_type) FROM o.cells) AS expected_rows;
-- avg() over expression_long averages only the cells that express the gene; mean counts the zeros
SELECT a.label, a.gene, round(a.mean, 6) AS mean_with_zeros,
       round((SELECT avg(e.count) FROM o.expression_long e JOIN o.cells c USING (cell_id)
               WHERE c.cell_type = a.label AND e.gene_id = a.gene_id), 6) AS avg_nonzeros_only,
       round(a.frac_expressing, 6) AS frac_expressing
  FROM dc_aggregate('cell_type', NULL, '["GENE3"]') a;
-- NULL labels form their own group, last; one group when group_by is NULL
SELECT label, n_cells, n_cells = (SELECT count(*) FROM o.cells WHERE batch IS label) AS size_ok
  FROM dc_aggregate_wide('batch');
SELECT label, n_cells, n_genes, length(sum) / 8 AS genes_in_blob FROM dc_aggregate_wide(NULL);
