-- Make the space retention freed reusable now, and give the file system back the
-- empty pages at the end of each table (indexes keep their pages: see reindex_*).
VACUUM messages, deliveries, events, account_reservations, account_days
