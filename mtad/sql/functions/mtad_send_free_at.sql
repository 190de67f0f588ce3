-- When the gap after an account's send ends, at p_now: two functions, the second
-- calling the first, so they live together (applied in this order).
--
-- mtad_unsettled_free_at: when the gap after a send still in flight ends, at
-- p_now: NULL while it may still be on the wire, since the receiver must see the
-- gap from its answer: while its delivery is leased to its node and the lease has
-- not ended. Then it counts as settled when the lease ended (a maybe-sent send
-- keeps its slot); a send whose delivery left its node otherwise, at the
-- delivery's last change; one reserved outside delivery is held for 15 minutes at
-- most. (A lease's end is its node's clock plus lease_duration, renewed every
-- third of it: only a clock minutes behind could end it while the send goes on.)
CREATE OR REPLACE FUNCTION mtad_unsettled_free_at(
    p_reserved_at timestamptz, p_next_gap double precision, p_delivery bigint, p_node text, p_now timestamptz
) RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN gone > p_now THEN NULL ELSE gone + make_interval(secs => p_next_gap) END
    FROM (
        SELECT CASE
            WHEN p_delivery IS NULL THEN p_reserved_at + interval '15 minutes'
            ELSE coalesce((SELECT CASE WHEN d.state::text = 'leased' AND d.lease_owner = p_node
                                       THEN d.lease_expires_at
                                       ELSE greatest(p_reserved_at, d.updated_at) END
                           FROM deliveries d WHERE d.id = p_delivery), p_reserved_at)
        END AS gone
    ) held
$$;

-- mtad_send_free_at: next_gap seconds after the send was settled (or reserved, if
-- later); a send without a gap ends none; NULL while a send with a gap is in
-- flight (mtad_unsettled_free_at, reached only then: this one is inlined).
CREATE OR REPLACE FUNCTION mtad_send_free_at(
    p_reserved_at timestamptz, p_settled_at timestamptz, p_next_gap double precision, p_delivery bigint,
    p_node text, p_now timestamptz
) RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN p_next_gap <= 0 THEN p_reserved_at
        WHEN p_settled_at IS NOT NULL THEN greatest(p_reserved_at, p_settled_at) + make_interval(secs => p_next_gap)
        ELSE mtad_unsettled_free_at(p_reserved_at, p_next_gap, p_delivery, p_node, p_now)
    END
$$;
