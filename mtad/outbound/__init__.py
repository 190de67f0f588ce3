"""How mtad reaches a receiver: DNS and MX routing by provider, the providers'
shaping limits, SMTP client sessions (warm, STARTTLS, pipelined), and what a reply
means (outcomes). Imports mtad.base only."""
