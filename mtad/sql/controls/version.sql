-- The controls' version now: read before the controls themselves, so that what a
-- node then reads holds every change of this version or an earlier one.
SELECT version FROM controls
