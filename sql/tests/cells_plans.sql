.load build/deltacells
-- EXPLAIN QUERY PLAN shows each plan in words (the grammar is in ext/vtab_cells.c)
EXPLAIN QUERY PLAN SELECT * FROM cells;
EXPLAIN QUERY PLAN SELECT count(*) FROM cells WHERE cell_type = 'NK';
EXPLAIN QUERY PLAN SELECT count(*) FROM cells WHERE cell_type IN ('B cell', 'NK') AND percent_mt < 5;
EXPLAIN QUERY PLAN SELECT * FROM cells WHERE cell_id = 7;
EXPLAIN QUERY PLAN SELECT * FROM cells WHERE cell_id BETWEEN 10 AND 20 AND age >= 30;
EXPLAIN QUERY PLAN SELECT * FROM cells WHERE tile = 2 AND batch IS NULL;
EXPLAIN QUERY PLAN SELECT cell_id FROM cells WHERE donor = 'D03' LIMIT 10 OFFSET 5;
EXPLAIN QUERY PLAN SELECT cell_id FROM cells ORDER BY cell_id LIMIT 3;
EXPLAIN QUERY PLAN SELECT cell_id FROM cells ORDER BY age LIMIT 3;
-- a number against a TEXT column depends on the other side's affinity: SQLite re-checks
EXPLAIN QUERY PLAN SELECT count(*) FROM cells WHERE barcode > 5;
-- collations other than BINARY are left to SQLite
EXPLAIN QUERY PLAN SELECT count(*) FROM cells WHERE cell_type = 'nk' COLLATE NOCASE;
-- a join looks cells up by cell_id from the small side
CREATE TEMP TABLE pick(id INTEGER);
INSERT INTO pick VALUES (3), (30), (300);
EXPLAIN QUERY PLAN SELECT c.cell_type FROM pick p JOIN cells c ON c.cell_id = p.id;
-- (its rows, and those of the other queries here, are checked against the oracle in cells_basic.sql)
