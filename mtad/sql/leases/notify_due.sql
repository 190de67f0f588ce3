SELECT pg_notify('mtad_due', '')
