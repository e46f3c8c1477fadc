.load build/deltacells
.headers on
ATTACH 'build/fixtures/small.oracle.db' AS o;
-- every row of expression and of expression_long equals the oracle's (built from the h5ad)
SELECT count(*) AS same_cells FROM expression e JOIN o.expression x USING (cell_id)
 WHERE e.genes = x.genes AND e.counts = x.counts;
SELECT (SELECT count(*) FROM expression_long) = (SELECT count(*) FROM o.expression_long) AS same_nnz;
SELECT count(*) = (SELECT count(*) FROM o.expression_long) AS same_long
  FROM expression_long e JOIN o.expression_long x ON x.rowid = e.rowid
 WHERE x.cell_id = e.cell_id AND x.gene_id = e.gene_id AND x.count = e.count;
EXPLAIN QUERY PLAN SELECT genes FROM expression WHERE cell_id IN (SELECT value FROM generate_series(1, 9));
EXPLAIN QUERY PLAN SELECT genes FROM expression WHERE cell_id = 3;
EXPLAIN QUERY PLAN SELECT * FROM expression WHERE cell_id >= 10 AND cell_id < 20 ORDER BY cell_id;
EXPLAIN QUERY PLAN SELECT avg(count) FROM expression_long WHERE gene_id = (SELECT gene_id FROM genes WHERE name = 'GENE1');
EXPLAIN QUERY PLAN SELECT * FROM expression_long WHERE cell_id = 4 AND gene_id IN (1, 2, 3);
