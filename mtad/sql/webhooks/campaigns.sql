-- The campaign of each of messages $1 that names one, for the requests of events
-- whose data does not say it (what came back later: a complaint, an open, ...).
SELECT m.id, c.name FROM messages m JOIN campaigns c ON c.id = m.campaign WHERE m.id = ANY($1::uuid[])
