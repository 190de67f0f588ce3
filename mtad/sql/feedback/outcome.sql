-- What delivery $1 ended with: its reason and last reply (a report's status and diagnostic).
SELECT reason::text AS reason, last_code, last_enhanced, last_text FROM deliveries WHERE id = $1
