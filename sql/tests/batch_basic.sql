.load build/deltacells
.headers on
-- a batch: one row, blobs sized by the counts
SELECT n_cells, n_genes, length(cell_ids) / 8 AS ids, length(indptr) / 8 AS indptr_len,
       length(indices) = length(data) AS same_len
  FROM dc_batch('[5, 3, 5, 2999, 0]');
-- every cell once, in order: the nonzeros add up to the dataset's
SELECT length(indices) / 4 = (SELECT value FROM dc_meta WHERE key = 'nnz') AS all_nnz
  FROM dc_batch((SELECT json_group_array(value) FROM generate_series(0, 2999)));
-- cell_ids is an int64 blob, itself a valid cells argument (same rows back)
SELECT n_cells, hex(indptr) = (SELECT hex(indptr) FROM dc_batch('[7, 1, 7]')) AS same
  FROM dc_batch((SELECT cell_ids FROM dc_batch('[7, 1, 7]')));
-- per-cell sizes agree with the expression table
SELECT (SELECT length(indices) FROM dc_batch('[42]')) = (SELECT length(genes) FROM expression WHERE cell_id = 42) AS cell42;
-- a gene panel by name, in a model's order: indices are panel positions
SELECT n_genes, length(indices) <= 4 * 3 * 2 AS small FROM dc_batch('[1, 2]',
  (SELECT json_group_array(name) FROM (SELECT name FROM genes WHERE gene_id IN (9, 0, 4) ORDER BY gene_id DESC)));
SELECT n_genes FROM dc_batch('[1]', NULL);
SELECT n_cells, length(indptr) FROM dc_batch('[]');
EXPLAIN QUERY PLAN SELECT * FROM dc_batch('[1]');
EXPLAIN QUERY PLAN SELECT * FROM dc_batch('[1]', '["x"]');
SELECT dc_config('threads', 2), dc_config('cache_mb', 64), dc_config('decode_mb', 128);
-- bad input: a blob whose length is not a multiple of 8
SELECT n_cells FROM dc_batch(x'0102030405');
