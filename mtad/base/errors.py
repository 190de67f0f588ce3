"""Every error mtad raises on purpose, as one tree.

Foreign exceptions (asyncpg, aiosmtpd, ssl, OSError from sockets) are translated
into these once, at the module that owns the foreign library; nothing above that
module catches a foreign exception.

    MtadError
     +-- ConfigError               bad configuration; carries every problem found
     +-- UsageError                a command given what it cannot use (exit 2)
     |    +-- filters.BadParameter a filter of the queue that is not one (the API's 400)
     +-- SpoolError
     |    +-- DatabaseUnavailable  PostgreSQL cannot be reached or dropped the
     |    |                        connection; the operation may be retried
     |    +-- OutcomeUnknown       the connection was lost while COMMIT was in
     |    |                        flight: the write may or may not have landed
     |    +-- NotFound             a queue id, delivery or tenant that does not exist
     |    +-- Conflict             a row that must be unique already exists
     +-- RouteTempFail             DNS could not answer now (SERVFAIL, timeout): retry later
     +-- EmbeddedDatabaseError     the embedded PostgreSQL could not be started
     +-- SpoolInUse                another live mtad owns the spool (its data directory,
     |                             or its node id on the database), or runs on another
     |                             spool with the same configuration file
     +-- ListenError               an address to listen on could not be bound
     +-- ProcessError              a child process exited before it was ready, or ended
     |    |                        with work unanswered
     |    +-- workers.WorkerGone   a signing process ended with requests unanswered, or
     |                             could not make a signature
     +-- IllegalTransition         a delivery or account state change its table forbids
     +-- AddressError              an address that is not a valid mailbox
     +-- TokenError                an OAuth access token could not be had
     |    +-- TokenRefused         the provider refused the refresh token (revoked,
     |                             expired, wrong client): the account is disconnected
     +-- relay.LoginFailed         an account's login could not be made; its verdict
     |                             says what that means for the account
     +-- RemoteError               a server mtad talks to failed a request, refused it,
          |                        or answered what mtad cannot use
          +-- HttpError            an HTTP request that got no answer (connection, TLS,
          |    |                   timeout); `cause` names the failure (http_client)
          |    +-- CertificateInvalid   the server's certificate is not valid for it
          |    +-- http_client.Refused  the host is not an address the request may go to
          +-- fetching.FetchError  an MTA-STS policy that could not be fetched or read
          +-- blast.SessionLost    a connection of `mtad blast` that cannot go on
          +-- mtasts.PolicyError   an MTA-STS policy file that does not parse
          +-- dane.TlsaError       TLSA rdata that does not parse
          +-- inbox.Refused        an IMAP server answered NO or BAD

The errors named by their module are defined there, where they are raised.
"""

from __future__ import annotations

from collections.abc import Sequence


class MtadError(Exception):
    """The root of every error mtad raises on purpose."""


class ConfigError(MtadError):
    """The configuration has one or more problems; `problems` lists them all."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


class UsageError(MtadError):
    """A command was given what it cannot use: an option missing or at odds with
    another, input it cannot read. The command line says it and exits 2."""


class SpoolError(MtadError):
    """A spool operation failed."""


class DatabaseUnavailable(SpoolError):
    """PostgreSQL could not be reached, or the connection broke before COMMIT."""


class OutcomeUnknown(DatabaseUnavailable):
    """The connection broke while COMMIT was in flight; the write may have landed."""


class NotFound(SpoolError):
    """The thing asked for does not exist."""


class Conflict(SpoolError):
    """A row that must be unique already exists."""


class RouteTempFail(MtadError):
    """The route of a domain cannot be known now (SERVFAIL, timeout); try later."""


class EmbeddedDatabaseError(MtadError):
    """The embedded PostgreSQL server could not be initialised or started."""


class SpoolInUse(MtadError):
    """Another live `mtad run` owns the spool asked for (its data directory, or its
    [node] id on the database), or one with the same configuration file runs on
    another spool; the message names it (pid, listen addresses, where its spool is)."""


class ListenError(MtadError):
    """An address of the configuration could not be listened on; the message names
    the key and the address."""


class ProcessError(MtadError):
    """A child process exited, or did not say it was ready, at start-up (a submission
    process); or ended with work unanswered (a signing process)."""


class IllegalTransition(MtadError):
    """A state change its table (lifecycle.TRANSITIONS, accounts.TRANSITIONS) does not allow."""


class AddressError(MtadError):
    """An address that is not a valid mailbox; `reason` is a short machine key."""

    def __init__(self, reason: str, text: str) -> None:
        self.reason = reason
        self.text = text
        super().__init__(text)


class TokenError(MtadError):
    """No OAuth access token now (the token endpoint is unreachable, or answered with
    a server error or something unreadable); try later."""


class TokenRefused(TokenError):
    """The token endpoint refused the refresh token or the client (invalid_grant,
    invalid_client, ...): only an operator can fix this."""


class RemoteError(MtadError):
    """A server mtad talks to failed a request, refused it, or answered what mtad
    cannot use; the text says which and why."""


class HttpError(RemoteError):
    """An HTTP request that got no answer (the connection, TLS, a timeout): `cause`
    names the failure (the foreign exception's class), `said` what it said; the text
    is `cause: said`."""

    def __init__(self, said: str, cause: str | None = None) -> None:
        self.cause = cause or type(self).__name__
        self.said = said
        super().__init__(f"{self.cause}: {said}")


class CertificateInvalid(HttpError):
    """The server's certificate is not valid for the host asked for (or not trusted)."""
