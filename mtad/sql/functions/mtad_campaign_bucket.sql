-- Where a campaign's delivery counts in its progress: a leased one is still queued,
-- a bounced or cancelled one by its reason, a suppressed one apart.
CREATE OR REPLACE FUNCTION mtad_campaign_bucket(state delivery_state, reason delivery_reason) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN state = 'leased' THEN 'queued'
        WHEN state = 'cancelled' AND reason = 'suppressed' THEN 'suppressed'
        WHEN state IN ('bounced', 'cancelled') THEN state::text || ':' || coalesce(reason::text, 'unknown')
        ELSE state::text
    END
$$;
