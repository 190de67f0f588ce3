-- A message counted at $2 for tenant $1 was not accepted after all: its count goes.
UPDATE tenant_usage SET messages = messages - 1
WHERE tenant = $1 AND messages > 0
  AND ((period = 'hour' AND starts = date_trunc('hour', $2::timestamptz, 'UTC'))
       OR (period = 'day' AND starts = date_trunc('day', $2::timestamptz, 'UTC')))
