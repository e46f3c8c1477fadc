.load build/deltacells
-- oracle: same output
.headers on
.mode list
-- the schema: built-in columns, then every obs column with its SQL type
SELECT name, type FROM pragma_table_info('cells');
SELECT count(*), min(cell_id), max(cell_id), count(DISTINCT tile) FROM cells;
SELECT cell_type, count(*) FROM cells GROUP BY cell_type ORDER BY 2 DESC, 1;
SELECT tile, count(*), min(cell_id), max(cell_id) FROM cells GROUP BY tile;
-- NULLs: missing categories (code -1), NaN reals
SELECT count(*) - count(batch) AS batch_nulls, count(*) - count(percent_mt) AS percent_mt_nulls FROM cells;
SELECT typeof(cell_id), typeof(name), typeof(tile), typeof(cell_type), typeof(age), typeof(percent_mt),
       typeof(is_doublet), typeof(barcode) FROM cells WHERE percent_mt IS NOT NULL LIMIT 1;
SELECT * FROM cells WHERE cell_id IN (0, 1999, 2999) ORDER BY cell_id;
SELECT cell_id, name FROM cells WHERE name = 'cell_42';
SELECT count(*) FROM cells WHERE cell_type IN ('B cell', 'NK') AND percent_mt < 5;
SELECT count(*) FROM cells WHERE tile = 1 AND is_doublet = 1;
SELECT count(*) FROM cells WHERE age BETWEEN 30 AND 40 AND batch IS NULL;
SELECT cell_id FROM cells WHERE cell_type = 'NK' ORDER BY cell_id LIMIT 5 OFFSET 10;
SELECT donor, round(avg(n_counts), 1) FROM cells WHERE cell_type = 'CD4 T' GROUP BY donor ORDER BY donor LIMIT 3;
SELECT cell_id FROM cells WHERE donor = 'D03' LIMIT 10 OFFSET 5;
SELECT cell_id, age FROM cells ORDER BY age DESC, cell_id LIMIT 3;
SELECT count(*), sum(n_counts), round(sum(percent_mt), 3), sum(is_doublet), count(DISTINCT barcode) FROM cells;
-- the same values through a view and a join with itself
CREATE TEMP VIEW nk AS SELECT cell_id, barcode FROM cells WHERE cell_type = 'NK';
SELECT count(*) FROM nk JOIN cells c USING (cell_id) WHERE c.barcode = nk.barcode;
-- a join looks cells up by cell_id from the small side (the plan: cells_plans.sql)
CREATE TEMP TABLE pick(id INTEGER);
INSERT INTO pick VALUES (3), (30), (300), (3000);
SELECT c.cell_id, c.cell_type, c.donor FROM pick p JOIN cells c ON c.cell_id = p.id ORDER BY 1;
