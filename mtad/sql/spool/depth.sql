SELECT state::text AS state, count(*) AS n FROM deliveries GROUP BY state
