-- Where node $1's process listens ($2: a JSON object of address lists by what they serve).
UPDATE nodes SET listening = $2::jsonb WHERE id = $1
