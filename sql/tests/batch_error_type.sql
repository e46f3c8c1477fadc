.load build/deltacells
-- a wrong argument type is an error saying what is expected
SELECT n_cells FROM dc_batch(42);
