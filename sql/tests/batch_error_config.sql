.load build/deltacells
SELECT dc_config('threads', 1), dc_config('cache_mb', 256);
-- an unknown setting is an error naming it
SELECT dc_config('cache_size', 5);
