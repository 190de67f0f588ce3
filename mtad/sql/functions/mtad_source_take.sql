-- A lease on a source address for node p_node, taken atomically for every node.
--
-- With p_address: a lease without a count on that address (every policy but
-- rotate). Without: a share of a rotate turn of pool p_pool, of up to p_want
-- sends: of the open turn of an address not in p_excluding, else of a new turn of
-- p_turn sends on an address drawn at random among those resting no longer. A
-- turn given out whose leases are all gone (ended, or expired with a dead node)
-- is first parked for p_park. Returns every address of the pool with its rest;
-- `given` marks the one leased (none when no address had a turn to give).
-- Takes of one pool are serialised by a transaction-scoped advisory lock.
CREATE OR REPLACE FUNCTION mtad_source_take(
    p_pool text, p_addresses text[], p_address text, p_excluding text[], p_node text, p_want integer,
    p_turn integer, p_park interval, p_now timestamptz, p_until timestamptz
) RETURNS TABLE (address text, given boolean, sends integer, parked_until timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_address text;
    v_sends integer;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('mtad_source'), hashtext(p_pool));
    INSERT INTO source_addresses AS s (address, pool, updated_at)
    SELECT a, p_pool, p_now FROM unnest(p_addresses) AS a
    ON CONFLICT ON CONSTRAINT source_addresses_pkey DO UPDATE SET pool = excluded.pool, updated_at = p_now
    WHERE s.pool <> excluded.pool;
    DELETE FROM source_leases l WHERE l.address = ANY (p_addresses) AND l.expires_at <= p_now;
    UPDATE source_addresses s
    SET turn = NULL, turn_sends = 0, parked_until = p_now + p_park, updated_at = p_now
    WHERE s.address = ANY (p_addresses) AND s.turn IS NOT NULL AND s.turn_sends >= s.turn
      AND NOT EXISTS (SELECT 1 FROM source_leases l WHERE l.address = s.address);

    IF p_address IS NOT NULL THEN
        v_address := p_address;
        INSERT INTO source_leases AS l (address, node, sends, taken_at, expires_at)
        VALUES (p_address, p_node, NULL, p_now, p_until)
        ON CONFLICT ON CONSTRAINT source_leases_pkey DO UPDATE SET expires_at = excluded.expires_at;
    ELSE
        SELECT s.address INTO v_address FROM source_addresses s
        WHERE s.address = ANY (p_addresses) AND NOT s.address = ANY (p_excluding) AND s.turn > s.turn_sends
        ORDER BY s.turn_sends DESC, s.address LIMIT 1;
        IF v_address IS NULL THEN
            SELECT s.address INTO v_address FROM source_addresses s
            WHERE s.address = ANY (p_addresses) AND NOT s.address = ANY (p_excluding) AND s.turn IS NULL
              AND (s.parked_until IS NULL OR s.parked_until <= p_now)
            ORDER BY random() LIMIT 1;
            UPDATE source_addresses s SET turn = p_turn, turn_sends = 0, parked_until = NULL, updated_at = p_now
            WHERE s.address = v_address;
        END IF;
        IF v_address IS NOT NULL THEN
            SELECT least(p_want, s.turn - s.turn_sends) INTO v_sends FROM source_addresses s
            WHERE s.address = v_address;
            UPDATE source_addresses s SET turn_sends = s.turn_sends + v_sends, updated_at = p_now
            WHERE s.address = v_address;
            INSERT INTO source_leases AS l (address, node, sends, taken_at, expires_at)
            VALUES (v_address, p_node, v_sends, p_now, p_until)
            ON CONFLICT ON CONSTRAINT source_leases_pkey
            DO UPDATE SET sends = coalesce(l.sends, 0) + excluded.sends, expires_at = excluded.expires_at;
        END IF;
    END IF;
    RETURN QUERY
    SELECT s.address, s.address = v_address, CASE WHEN s.address = v_address THEN v_sends END,
           CASE WHEN s.parked_until > p_now THEN s.parked_until END
    FROM source_addresses s WHERE s.address = ANY (p_addresses);
END;
$$;
