.load build/deltacells
.headers on
ATTACH 'build/fixtures/small.oracle.db' AS o;
-- the same columns, names and declared types as the oracle's native table (built from the h5ad)
SELECT count(*) AS columns, sum(a.name = b.name AND a.type = b.type) AS same
  FROM pragma_table_info('cells') a JOIN pragma_table_info('cells', 'o') b USING (cid);
SELECT (SELECT count(*) FROM pragma_table_info('cells')) = (SELECT count(*) FROM pragma_table_info('cells', 'o')) AS same_width;
-- every value of every row equals the oracle's, NULLs and storage classes included: by a scan of
-- cells, then by one cell_id lookup per oracle row
SELECT count(*) AS same_rows FROM cells c JOIN o.cells x USING (cell_id)
 WHERE c.name IS x.name AND c.tile IS x.tile AND c.cell_type IS x.cell_type AND c.donor IS x.donor
   AND c.batch IS x.batch AND c.age IS x.age AND c.n_counts IS x.n_counts AND c.percent_mt IS x.percent_mt
   AND c.is_doublet IS x.is_doublet AND c.barcode IS x.barcode
   AND typeof(c.age) = typeof(x.age) AND typeof(c.percent_mt) = typeof(x.percent_mt)
   AND typeof(c.is_doublet) = typeof(x.is_doublet) AND typeof(c.batch) = typeof(x.batch);
SELECT count(*) AS same_by_lookup FROM o.cells x CROSS JOIN cells c ON c.cell_id = x.cell_id
 WHERE c.name IS x.name AND c.tile IS x.tile AND c.cell_type IS x.cell_type AND c.donor IS x.donor
   AND c.batch IS x.batch AND c.age IS x.age AND c.n_counts IS x.n_counts AND c.percent_mt IS x.percent_mt
   AND c.is_doublet IS x.is_doublet AND c.barcode IS x.barcode;
SELECT (SELECT count(*) FROM cells) AS cells, (SELECT count(*) FROM o.cells) AS oracle_cells;
