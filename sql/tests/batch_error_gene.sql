.load build/deltacells
-- an unknown gene name is an error naming it
SELECT n_cells FROM dc_batch('[0]', '["GENE1", "NO_SUCH_GENE"]');
