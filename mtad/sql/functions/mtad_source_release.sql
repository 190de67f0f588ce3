-- Node p_node gives back its leases on p_addresses of pool p_pool. A turn given out
-- whose leases are now all gone is parked for p_park; returns those addresses.
-- Serialised with mtad_source_take by the same advisory lock, so that two nodes
-- giving back the last two leases of a turn at once do not both miss the park.
CREATE OR REPLACE FUNCTION mtad_source_release(
    p_pool text, p_addresses text[], p_node text, p_park interval, p_now timestamptz
) RETURNS TABLE (address text) LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('mtad_source'), hashtext(p_pool));
    DELETE FROM source_leases l WHERE l.node = p_node AND l.address = ANY (p_addresses);
    RETURN QUERY
    UPDATE source_addresses s
    SET turn = NULL, turn_sends = 0, parked_until = p_now + p_park, updated_at = p_now
    WHERE s.address = ANY (p_addresses) AND s.turn IS NOT NULL AND s.turn_sends >= s.turn
      AND NOT EXISTS (SELECT 1 FROM source_leases l WHERE l.address = s.address AND l.expires_at > p_now)
    RETURNING s.address;
END;
$$;
