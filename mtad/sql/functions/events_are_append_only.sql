-- events is append-only: a trigger (migration 0001) refuses every UPDATE with this.
CREATE OR REPLACE FUNCTION events_are_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events is append-only';
END
$$;
