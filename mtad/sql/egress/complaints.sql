-- The complaints that arrived within each warm-up day: of address $1[i] at provider
-- $2[i], in the 24 hours from $3[i]. They are counted to the minute (by the
-- reputation consumer); a minute counts towards the day in which it ends, so that
-- one a day's start cuts in two goes to the day still to be judged. One row per
-- day with complaints.
SELECT d.address, d.provider, sum(c.complaints)::integer AS complaints
FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS d (address, provider, day_started)
JOIN warmup_complaints c ON c.address = d.address AND c.provider = d.provider
    AND c.minute > d.day_started - interval '1 minute'  -- its minute ends within the day
    AND c.minute <= d.day_started + interval '23 hours 59 minutes'
GROUP BY d.address, d.provider
