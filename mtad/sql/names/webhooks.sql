-- Every webhook endpoint's id, with its tenant.
SELECT id, tenant FROM webhook_endpoints ORDER BY id
