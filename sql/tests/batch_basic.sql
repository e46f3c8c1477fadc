.load build/deltacells
.headers on
ATTACH 'build/fixtures/small.oracle.db' AS o;
-- Every blob is compared with what the oracle (native tables built from the h5ad) says it must
-- hold: cell_ids and indptr are int64 LE, indices and data int32 LE, written out here as hex with
-- printf('%02X...', v & 255, v >> 8 & 255, ...) (all values here are below 2^31).
-- a batch: one row, blobs sized by the counts, cells in the order asked, repeats kept
SELECT n_cells, n_genes, length(cell_ids) / 8 AS ids, length(indptr) / 8 AS indptr_len,
       length(indices) = length(data) AS same_len
  FROM dc_batch('[5, 3, 5, 2999, 0]');
WITH req(k, cell) AS (SELECT key, value FROM json_each('[5, 3, 5, 2999, 0]')),
     ref AS (SELECT k, cell, x.genes, x.counts, sum(length(x.genes) / 4) OVER (ORDER BY k) AS stop
               FROM req JOIN o.expression x ON x.cell_id = req.cell)
SELECT hex(b.cell_ids) = (SELECT group_concat(printf('%02X%02X000000000000', cell & 255, cell >> 8 & 255), '')
                            FROM (SELECT cell FROM req ORDER BY k)) AS cell_ids_ok,
       hex(b.indptr) = '0000000000000000' || (SELECT group_concat(printf('%02X%02X%02X%02X00000000',
                            stop & 255, stop >> 8 & 255, stop >> 16 & 255, stop >> 24 & 255), '')
                            FROM (SELECT stop FROM ref ORDER BY k)) AS indptr_ok,
       hex(b.indices) = (SELECT group_concat(hex(genes), '') FROM (SELECT genes FROM ref ORDER BY k)) AS indices_ok,
       hex(b.data) = (SELECT group_concat(hex(counts), '') FROM (SELECT counts FROM ref ORDER BY k)) AS data_ok
  FROM dc_batch('[5, 3, 5, 2999, 0]') b;
-- every cell once, in order: the whole matrix, nonzero by nonzero
SELECT n_cells, length(indices) / 4 AS nnz, (SELECT value FROM o.dc_meta WHERE key = 'nnz') AS oracle_nnz,
       hex(indices) = (SELECT group_concat(hex(genes), '') FROM (SELECT genes FROM o.expression ORDER BY cell_id)) AS indices_ok,
       hex(data) = (SELECT group_concat(hex(counts), '') FROM (SELECT counts FROM o.expression ORDER BY cell_id)) AS data_ok
  FROM dc_batch((SELECT json_group_array(value) FROM generate_series(0, 2999)));
-- cell_ids is an int64 blob, itself a valid cells argument (same rows back)
SELECT n_cells, hex(indptr) = (SELECT hex(indptr) FROM dc_batch('[7, 1, 7]')) AS same,
       hex(data) = (SELECT hex(data) FROM dc_batch('[7, 1, 7]')) AS same_data
  FROM dc_batch((SELECT cell_ids FROM dc_batch('[7, 1, 7]')));
-- a gene panel by name, in a model's order: indices are positions in the panel (not gene ids),
-- ascending within a cell, with the counts of those genes; a gene a cell lacks is left out
WITH panel(p, name) AS (SELECT key, value FROM json_each((SELECT json_group_array(name) FROM
       (SELECT name FROM o.genes WHERE gene_id IN (9, 0, 300, 500, 800, 1999) ORDER BY gene_id DESC)))),
     req(k, cell) AS (SELECT key, value FROM json_each('[1, 2, 2999, 1]')),
     ref AS (SELECT req.k, req.cell, p.p, l.count FROM req JOIN panel p JOIN o.genes g ON g.name = p.name
               JOIN o.expression_long l ON l.gene_id = g.gene_id AND l.cell_id = req.cell),
     stops AS (SELECT req.k, (SELECT count(*) FROM ref WHERE ref.k <= req.k) AS stop FROM req)
SELECT b.n_cells, b.n_genes, length(b.indices) / 4 AS nnz, (SELECT count(*) FROM ref) AS oracle_nnz, hex(b.indices) AS indices,
       hex(b.indices) = (SELECT group_concat(printf('%02X000000', p), '') FROM (SELECT p FROM ref ORDER BY k, p)) AS positions_ok,
       hex(b.data) = (SELECT group_concat(printf('%02X%02X%02X%02X', count & 255, count >> 8 & 255, count >> 16 & 255,
                        count >> 24 & 255), '') FROM (SELECT count FROM ref ORDER BY k, p)) AS data_ok,
       hex(b.indptr) = '0000000000000000' || (SELECT group_concat(printf('%02X00000000000000', stop), '')
                        FROM (SELECT stop FROM stops ORDER BY k)) AS indptr_ok
  FROM dc_batch('[1, 2, 2999, 1]', (SELECT json_group_array(name) FROM (SELECT name FROM panel ORDER BY p))) b;
SELECT n_genes FROM dc_batch('[1]', NULL);
SELECT n_cells, length(indptr) FROM dc_batch('[]');
EXPLAIN QUERY PLAN SELECT * FROM dc_batch('[1]');
EXPLAIN QUERY PLAN SELECT * FROM dc_batch('[1]', '["x"]');
SELECT dc_config('threads', 2), dc_config('cache_mb', 64), dc_config('decode_mb', 128);
-- bad input: a blob whose length is not a multiple of 8
SELECT n_cells FROM dc_batch(x'0102030405');
