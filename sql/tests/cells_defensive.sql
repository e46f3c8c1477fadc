.load build/deltacells
.dbconfig defensive on
-- shadow tables are read-only to SQL in defensive mode; the table still reads them
SELECT count(*) FROM cells WHERE cell_type = 'NK';
UPDATE cells_blocks SET data = x'00';
