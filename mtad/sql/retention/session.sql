-- The pruner's own connection reads every table through an index (a range of a
-- primary key, deliveries by message): a plan made from the statistics of an
-- empty table must not turn a batch into a scan of the whole table.
SELECT set_config('enable_seqscan', 'off', false), set_config('plan_cache_mode', 'force_custom_plan', false)
