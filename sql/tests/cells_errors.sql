.load build/deltacells
-- a database without the shadow tables: the message names the missing one
ATTACH ':memory:' AS empty;
CREATE VIRTUAL TABLE temp.c2 USING deltacells_cells;
