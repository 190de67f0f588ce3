-- SMTP TLS reporting (RFC 8460): the sessions made under a recipient domain's TLS
-- policy, counted per UTC day, and the reports made of them: one per domain and
-- day for the whole cluster, claimed here before it is sent.
CREATE TABLE tls_report_counts (
    day           date NOT NULL,
    domain        text NOT NULL,          -- the policy domain
    policy_type   text NOT NULL CHECK (policy_type IN ('sts', 'tlsa')),
    result        text NOT NULL,          -- 'success', or a result type of RFC 8460 4.3
    mx_host       text NOT NULL,
    receiving_ip  text NOT NULL,          -- '': no connection was made
    sending_ip    text NOT NULL,          -- '': the system's choice
    detail        text NOT NULL DEFAULT '',  -- a failure's words (the latest)
    sessions      bigint NOT NULL,
    PRIMARY KEY (day, domain, policy_type, result, mx_host, receiving_ip, sending_ip)
);

CREATE TABLE tls_reports (
    day        date NOT NULL,
    domain     text NOT NULL,
    report_id  text NOT NULL,
    made_at    timestamptz NOT NULL,
    sent_to    text[] NOT NULL DEFAULT '{}',  -- the rua URIs it went to
    failures   text[] NOT NULL DEFAULT '{}',  -- why it did not go to others
    PRIMARY KEY (day, domain)
);
