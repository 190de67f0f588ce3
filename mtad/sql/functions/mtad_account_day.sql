-- The day containing `at` in the time zone `zone`: [00:00, next 00:00) local time,
-- 23 or 25 hours long on the days clocks change.
CREATE OR REPLACE FUNCTION mtad_account_day(zone text, at timestamptz)
RETURNS tstzrange LANGUAGE sql STABLE AS $$
    SELECT tstzrange(((at AT TIME ZONE zone)::date)::timestamp AT TIME ZONE zone,
                     ((at AT TIME ZONE zone)::date + 1)::timestamp AT TIME ZONE zone)
$$;
