.load build/deltacells
-- a cell id out of range is an error naming the id and the range
SELECT n_cells FROM dc_batch('[0, 1, 3000]');
