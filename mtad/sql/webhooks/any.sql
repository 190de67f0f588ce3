-- Whether any tenant has a webhook endpoint.
SELECT EXISTS (SELECT FROM webhook_endpoints)
