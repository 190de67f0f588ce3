-- Rebuild the indexes of deliveries without blocking writes: index pages emptied by
-- retention are reused, never given back, until the index is rebuilt.
REINDEX TABLE CONCURRENTLY deliveries
