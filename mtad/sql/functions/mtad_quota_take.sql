-- Count one message of tenant p_tenant at p_now against its rate quotas (p_hour
-- messages in the clock hour, p_day in the UTC day; NULL: no limit), or say which
-- is full: 'hour' or 'day' (nothing is counted then), NULL when counted. Both
-- counters move together, under their row locks, so nodes never overshoot.
CREATE OR REPLACE FUNCTION mtad_quota_take(p_tenant text, p_now timestamptz, p_hour integer, p_day integer)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_hour timestamptz := date_trunc('hour', p_now, 'UTC');
    v_day timestamptz := date_trunc('day', p_now, 'UTC');
    v_used_hour integer;
    v_used_day integer;
BEGIN
    INSERT INTO tenant_usage (tenant, period, starts) VALUES (p_tenant, 'hour', v_hour), (p_tenant, 'day', v_day)
    ON CONFLICT DO NOTHING;
    SELECT messages INTO v_used_hour FROM tenant_usage
    WHERE tenant = p_tenant AND period = 'hour' AND starts = v_hour FOR UPDATE;
    SELECT messages INTO v_used_day FROM tenant_usage
    WHERE tenant = p_tenant AND period = 'day' AND starts = v_day FOR UPDATE;
    IF p_hour IS NOT NULL AND v_used_hour >= p_hour THEN
        RETURN 'hour';
    END IF;
    IF p_day IS NOT NULL AND v_used_day >= p_day THEN
        RETURN 'day';
    END IF;
    UPDATE tenant_usage SET messages = messages + 1
    WHERE tenant = p_tenant AND ((period = 'hour' AND starts = v_hour) OR (period = 'day' AND starts = v_day));
    RETURN NULL;
END
$$;
