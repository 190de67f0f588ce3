-- Rebuild the indexes of events without blocking writes: index pages emptied by
-- retention are reused, never given back, until the index is rebuilt.
REINDEX TABLE CONCURRENTLY events
