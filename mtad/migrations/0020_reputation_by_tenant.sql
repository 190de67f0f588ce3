-- The reputation windows of a tenant by provider group and source address too
-- (`mtad tenants show`): each provider and source count carries its tenant, and
-- the cluster's windows of a provider or a source are the sums over tenants. A
-- tenant's own count has tenant = key. Counts from before carry the tenant ''.
ALTER TABLE reputation_counts ADD COLUMN tenant text NOT NULL DEFAULT '';
UPDATE reputation_counts SET tenant = key WHERE scope = 'tenant';
ALTER TABLE reputation_counts DROP CONSTRAINT reputation_counts_pkey;
ALTER TABLE reputation_counts ADD PRIMARY KEY (scope, tenant, key, minute);
