-- Delivery: the provider group a delivery was last routed to (for `queue ls
-- --provider`), and how many times mtad itself failed it (a dead letter after
-- repeated failures that are not the receiver's).
ALTER TABLE deliveries ADD COLUMN route_group text;
ALTER TABLE deliveries ADD COLUMN failures integer NOT NULL DEFAULT 0;
