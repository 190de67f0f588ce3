"""Operating mtad over HTTP: the admin API (`[admin]`), and the JSON views of the
spool, the tenants and the accounts that it and the command line share.

views    what the tools show: deliveries, messages, tenants, accounts, as JSON-able dicts
inject   a message given over HTTP (raw with its envelope, or structured) to the accept
api      the aiohttp application: bearer token, JSON errors, the /v1 routes
page     the status page at `/` (static/: HTML, JS, CSS), its login cookie
status   what the page reads beside the rest: the queue overview, the rate per minute, the nodes, the warm-up
openapi  the OpenAPI document of /v1
names    the names an operator gives (tenants, pools, groups, accounts, ...) checked, with a did-you-mean
"""
