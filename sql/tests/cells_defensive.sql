.load build/deltacells
.dbconfig defensive on
-- shadow tables are read-only to SQL in defensive mode; the table still reads them
ATTACH 'build/fixtures/small.oracle.db' AS o;
SELECT count(*), (SELECT count(*) FROM o.cells WHERE cell_type = 'NK') FROM cells WHERE cell_type = 'NK';
UPDATE cells_blocks SET data = x'00';
