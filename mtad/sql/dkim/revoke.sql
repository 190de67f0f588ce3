-- Retiring key $1 is revoked at $2 (its record may now be emptied: p=), with its
-- dkim_key event saying so. Returns it.
WITH changed AS (
    UPDATE dkim_keys SET state = 'revoked', changed_at = $2 WHERE id = $1 AND state = 'retiring'
    RETURNING id, domain, selector, algorithm
), logged AS (
    INSERT INTO events (at, kind, data)
    SELECT $2, 'dkim_key', jsonb_build_object('domain', domain, 'selector', selector, 'algorithm', algorithm,
                                              'from', 'retiring', 'to', 'revoked',
                                              'publish', selector || '._domainkey.' || domain || '. IN TXT "v=DKIM1; p="')
    FROM changed
)
SELECT id, domain, selector FROM changed
