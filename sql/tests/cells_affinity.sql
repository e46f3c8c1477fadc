.load build/deltacells
-- oracle: same output
-- '5' against 5: each line is a WHERE clause and the count of cells it matches. The oracle's
-- cells is a native table with the same declared types, built from the h5ad (sql/tests/oracle.py):
-- the two must count the same, SQLite's affinity rules included.
SELECT 'age = ''35''', count(*) FROM cells WHERE age = '35';
SELECT 'age = 35.0', count(*) FROM cells WHERE age = 35.0;
SELECT 'age = ''35.0''', count(*) FROM cells WHERE age = '35.0';
SELECT 'age = '' 35 ''', count(*) FROM cells WHERE age = ' 35 ';
SELECT 'age = 35.5', count(*) FROM cells WHERE age = 35.5;
SELECT 'age < ''x''', count(*) FROM cells WHERE age < 'x';
SELECT 'age > ''x''', count(*) FROM cells WHERE age > 'x';
SELECT 'age IN (''35'', 36.0, ''37.5'', NULL)', count(*) FROM cells WHERE age IN ('35', 36.0, '37.5', NULL);
SELECT 'percent_mt < ''2''', count(*) FROM cells WHERE percent_mt < '2';
SELECT 'percent_mt >= 2', count(*) FROM cells WHERE percent_mt >= 2;
SELECT 'cell_type = 5', count(*) FROM cells WHERE cell_type = 5;
SELECT 'cell_type > 5', count(*) FROM cells WHERE cell_type > 5;
SELECT 'cell_type < x''00''', count(*) FROM cells WHERE cell_type < x'00';
SELECT 'cell_type = NULL', count(*) FROM cells WHERE cell_type = NULL;
SELECT 'cell_type IS NULL', count(*) FROM cells WHERE cell_type IS NULL;
SELECT 'batch IS NULL', count(*) FROM cells WHERE batch IS NULL;
SELECT 'batch >= ''b3''', count(*) FROM cells WHERE batch >= 'b3';
SELECT 'is_doublet IN (1, ''1'', 1.0, ''true'')', count(*) FROM cells WHERE is_doublet IN (1, '1', 1.0, 'true');
SELECT 'cell_id IN (1, ''2'', 3.0, 3.5, ''x'', NULL, 2999, 3000)', count(*) FROM cells WHERE cell_id IN (1, '2', 3.0, 3.5, 'x', NULL, 2999, 3000);
SELECT 'cell_id < 10.5', count(*) FROM cells WHERE cell_id < 10.5;
SELECT 'cell_id >= 2990.5', count(*) FROM cells WHERE cell_id >= 2990.5;
SELECT 'tile = ''1''', count(*) FROM cells WHERE tile = '1';
SELECT 'tile IN (2, 7, -1)', count(*) FROM cells WHERE tile IN (2, 7, -1);
SELECT 'name > ''cell_2999''', count(*) FROM cells WHERE name > 'cell_2999';
SELECT 'barcode < 5', count(*) FROM cells WHERE barcode < 5;
SELECT 'donor BETWEEN ''D03'' AND ''D05''', count(*) FROM cells WHERE donor BETWEEN 'D03' AND 'D05';
