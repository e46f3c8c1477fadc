.load build/deltacells
-- '5' against 5: each line is a WHERE clause, the cells table's count and a native table's
-- (same declared types, same data); the two counts must agree
CREATE TEMP TABLE native AS SELECT * FROM cells;
SELECT 'age = ''35''', (SELECT count(*) FROM cells WHERE age = '35'), (SELECT count(*) FROM native WHERE age = '35');
SELECT 'age = 35.0', (SELECT count(*) FROM cells WHERE age = 35.0), (SELECT count(*) FROM native WHERE age = 35.0);
SELECT 'age = ''35.0''', (SELECT count(*) FROM cells WHERE age = '35.0'), (SELECT count(*) FROM native WHERE age = '35.0');
SELECT 'age = '' 35 ''', (SELECT count(*) FROM cells WHERE age = ' 35 '), (SELECT count(*) FROM native WHERE age = ' 35 ');
SELECT 'age = 35.5', (SELECT count(*) FROM cells WHERE age = 35.5), (SELECT count(*) FROM native WHERE age = 35.5);
SELECT 'age < ''x''', (SELECT count(*) FROM cells WHERE age < 'x'), (SELECT count(*) FROM native WHERE age < 'x');
SELECT 'age > ''x''', (SELECT count(*) FROM cells WHERE age > 'x'), (SELECT count(*) FROM native WHERE age > 'x');
SELECT 'age IN (''35'', 36.0, ''37.5'', NULL)', (SELECT count(*) FROM cells WHERE age IN ('35', 36.0, '37.5', NULL)), (SELECT count(*) FROM native WHERE age IN ('35', 36.0, '37.5', NULL));
SELECT 'percent_mt < ''2''', (SELECT count(*) FROM cells WHERE percent_mt < '2'), (SELECT count(*) FROM native WHERE percent_mt < '2');
SELECT 'percent_mt >= 2', (SELECT count(*) FROM cells WHERE percent_mt >= 2), (SELECT count(*) FROM native WHERE percent_mt >= 2);
SELECT 'cell_type = 5', (SELECT count(*) FROM cells WHERE cell_type = 5), (SELECT count(*) FROM native WHERE cell_type = 5);
SELECT 'cell_type > 5', (SELECT count(*) FROM cells WHERE cell_type > 5), (SELECT count(*) FROM native WHERE cell_type > 5);
SELECT 'cell_type < x''00''', (SELECT count(*) FROM cells WHERE cell_type < x'00'), (SELECT count(*) FROM native WHERE cell_type < x'00');
SELECT 'cell_type = NULL', (SELECT count(*) FROM cells WHERE cell_type = NULL), (SELECT count(*) FROM native WHERE cell_type = NULL);
SELECT 'cell_type IS NULL', (SELECT count(*) FROM cells WHERE cell_type IS NULL), (SELECT count(*) FROM native WHERE cell_type IS NULL);
SELECT 'batch IS NULL', (SELECT count(*) FROM cells WHERE batch IS NULL), (SELECT count(*) FROM native WHERE batch IS NULL);
SELECT 'batch >= ''b3''', (SELECT count(*) FROM cells WHERE batch >= 'b3'), (SELECT count(*) FROM native WHERE batch >= 'b3');
SELECT 'is_doublet IN (1, ''1'', 1.0, ''true'')', (SELECT count(*) FROM cells WHERE is_doublet IN (1, '1', 1.0, 'true')), (SELECT count(*) FROM native WHERE is_doublet IN (1, '1', 1.0, 'true'));
SELECT 'cell_id IN (1, ''2'', 3.0, 3.5, ''x'', NULL, 2999, 3000)', (SELECT count(*) FROM cells WHERE cell_id IN (1, '2', 3.0, 3.5, 'x', NULL, 2999, 3000)), (SELECT count(*) FROM native WHERE cell_id IN (1, '2', 3.0, 3.5, 'x', NULL, 2999, 3000));
SELECT 'cell_id < 10.5', (SELECT count(*) FROM cells WHERE cell_id < 10.5), (SELECT count(*) FROM native WHERE cell_id < 10.5);
SELECT 'cell_id >= 2990.5', (SELECT count(*) FROM cells WHERE cell_id >= 2990.5), (SELECT count(*) FROM native WHERE cell_id >= 2990.5);
SELECT 'tile = ''1''', (SELECT count(*) FROM cells WHERE tile = '1'), (SELECT count(*) FROM native WHERE tile = '1');
SELECT 'tile IN (2, 7, -1)', (SELECT count(*) FROM cells WHERE tile IN (2, 7, -1)), (SELECT count(*) FROM native WHERE tile IN (2, 7, -1));
SELECT 'name > ''cell_2999''', (SELECT count(*) FROM cells WHERE name > 'cell_2999'), (SELECT count(*) FROM native WHERE name > 'cell_2999');
SELECT 'barcode < 5', (SELECT count(*) FROM cells WHERE barcode < 5), (SELECT count(*) FROM native WHERE barcode < 5);
SELECT 'donor BETWEEN ''D03'' AND ''D05''', (SELECT count(*) FROM cells WHERE donor BETWEEN 'D03' AND 'D05'), (SELECT count(*) FROM native WHERE donor BETWEEN 'D03' AND 'D05');
