-- Whether anything an operator did may concern a batch of begins (mtad_begin): a
-- paused tenant of the batch, a campaign of its deliveries stopped or with limits,
-- a suspension of its groups, tenants, pools or sources, a reroute of its groups, a
-- disabled account of it, or a suppression of its recipients under any of its
-- tenants or the global list. Broader than what leases/begin_query.sql finds (any
-- key of the batch, not each delivery's own): false only when none can apply.
CREATE OR REPLACE FUNCTION mtad_begin_concerned(
    ids bigint[], groups text[], now timestamptz, tenants text[], pools text[], sources text[], accounts bigint[]
) RETURNS boolean
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $fn$
BEGIN
    RETURN EXISTS (SELECT FROM tenant_states t WHERE t.tenant = ANY(tenants) AND t.paused_at IS NOT NULL)
       OR EXISTS (
           SELECT FROM deliveries d JOIN campaigns c ON c.id = d.campaign
           WHERE d.id = ANY(ids) AND (c.state <> 'active' OR c.max_per_hour IS NOT NULL OR c.max_per_day IS NOT NULL))
       OR EXISTS (
           SELECT FROM suspensions s
           WHERE (s.until IS NULL OR s.until > now)
             AND ((s.kind = 'provider' AND s.key = ANY(groups)) OR (s.kind = 'tenant' AND s.key = ANY(tenants))
                  OR (s.kind = 'pool' AND s.key = ANY(pools)) OR (s.kind = 'source' AND s.key = ANY(sources))))
       OR EXISTS (SELECT FROM reroutes r WHERE r.provider = ANY(groups) AND (r.until IS NULL OR r.until > now))
       OR EXISTS (
           SELECT FROM accounts a
           WHERE a.id = ANY(accounts) AND a.state = 'disabled' AND (a.state_until IS NULL OR a.state_until > now))
       OR EXISTS (
           SELECT FROM deliveries d JOIN suppressions s ON s.address = lower(d.recipient)
           WHERE d.id = ANY(ids) AND s.tenant = ANY(array_append(tenants, ''))
             AND (s.expires_at IS NULL OR s.expires_at > now));
END
$fn$;
