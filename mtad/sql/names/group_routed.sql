-- Whether a delivery was ever routed to group $1 (a sequential scan when none was:
-- asked only of a name found nowhere else).
SELECT EXISTS (SELECT 1 FROM deliveries WHERE route_group = $1)
