-- Every sending account's name.
SELECT name FROM accounts ORDER BY name
