-- Tenant $1's messages counted in the clock hour and the UTC day of $2.
SELECT coalesce(sum(messages) FILTER (WHERE period = 'hour' AND starts = date_trunc('hour', $2::timestamptz, 'UTC')), 0)
           AS hour,
       coalesce(sum(messages) FILTER (WHERE period = 'day' AND starts = date_trunc('day', $2::timestamptz, 'UTC')), 0)
           AS day
FROM tenant_usage WHERE tenant = $1
