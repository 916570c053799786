// Package mysql is the MySQL and MariaDB prober of the probes library: it
// logs in, runs a query and passes when the query completes and its first
// column, if any, is not false. It returns probes.Result values with the
// reasons of package probes (probes.ReasonAuth, probes.ReasonDBMissing,
// probes.ReasonQueryFalse, ...) and runs under a probes.Scheduler like any
// other probes.Prober.
//
// It speaks the protocol through github.com/go-sql-driver/mysql, the
// maintained pure-Go driver (MPL-2.0, the one most Go programs use), which
// supports MariaDB as well as MySQL. A client of its own would have to
// implement the authentication methods (mysql_native_password,
// caching_sha2_password with its RSA exchange, client_ed25519, switches
// between them) and the upgrade to TLS in the middle of the login. The
// driver's init registers the "mysql" database/sql driver in every program
// that links this package, which is why it is a package of its own; the
// prober itself uses neither database/sql nor any of the driver's
// process-wide registries (dialers, TLS configurations, server keys).
//
// Build a Prober per configuration with New; a configuration that cannot
// work (no user, an unknown TLSMode, verify-ca without a CA, a certificate
// without its key in a mode that uses TLS) is refused there; with
// TLSDisable the certificates are ignored. A Prober is safe for concurrent use and
// holds no state between probes. Each probe opens exactly one connection,
// through the Config's Dialer, and closes it (after COM_QUIT when logged
// in). The context's deadline bounds the whole probe: it is the socket's
// deadline, and the end of the context closes the socket whatever the probe
// is doing. The server is not told the deadline: a query still running when
// the probe gives up runs on until the server notices the closed connection,
// so the query should be cheap.
//
// # The query
//
// Query runs once, "SELECT 1" by default. The probe passes when the query
// completes (every row read, up to its end: an error in a later row fails
// it) and, if it returned a row, the first column of the first row is true.
// NULL, zero (an integer, float, DECIMAL such as 0.00, or a BIT of zeros)
// and the text false, f, 0, no and off (any case, surrounding space ignored)
// are false; anything else, the empty string included, is true. A query
// without rows, or without a result set ("DO 1"), passes. These are the
// rules of probes/postgresql.
//
// "SELECT @@read_only = 0" passes on a writable server only; it fails with
// probes.ReasonQueryFalse on a replica that has read_only set. ("SELECT
// @@read_only" would pass on the replica and fail on the primary.)
//
// # Reasons
//
// Errors the server reports map by their number (MySQL and MariaDB share
// those below 2000): access denied, no access to the database, a host not
// allowed or blocked, an expired password or a locked account (1044, 1045,
// 1129, 1130, 1251, 1698, 1820, 1862, 3118, 4151) are probes.ReasonAuth;
// an unknown database (1049) probes.ReasonDBMissing; max_connections,
// max_user_connections and other account limits (1040, 1203, 1226)
// probes.ReasonTooManyConnections; a server shutting down, in offline
// mode, a killed session or a Galera node not ready (1053, 1927, 3032, 3169,
// 1047) probes.ReasonUnavailable; a query past the server's own time limit
// (1969, 3024) probes.ReasonTimeout; any other error of the query (a lock
// wait timeout, 1205, included) probes.ReasonQueryError. An authentication
// method the driver does not support is probes.ReasonAuth; anything the
// client cannot read, and a server that could not read the login or saw
// packets out of order (1043, 1156), is probes.ReasonProtocol; network
// failures have the reasons of probes.Classify.
//
// # TLS
//
// TLSMode is required: TLSDisable, TLSRequire, TLSVerifyCA or
// TLSVerifyFull (MySQL's DISABLED, REQUIRED, VERIFY_CA and
// VERIFY_IDENTITY; require with a CACert verifies the chain, as
// probes/postgresql does). verify-full checks ServerName, or the target's
// host. The prober negotiates TLS itself, with the certificates of the
// Config held in memory, and hands the driver the connection above TLS; a
// server that sends anything between its greeting and the TLS handshake
// fails the probe (probes.ReasonProtocol): those bytes would otherwise be
// read as if they had come over TLS.
//
// # Passwords
//
// mysql_native_password, client_ed25519 and the fast path of
// caching_sha2_password prove the password without sending it, and are
// always answered. mysql_clear_password sends it in clear; without TLS,
// sha256_password and the full authentication of caching_sha2_password
// send it encrypted with an RSA key the server supplies, which whoever
// answers on the target's address can supply. These are answered only
// over a verified connection (TLSVerifyCA, TLSVerifyFull, or TLSRequire
// with CACert) or when Config.AllowCleartextPassword is set; otherwise the
// probe fails with probes.ReasonAuth before the password is sent.
// MariaDB's PAM dialog is not supported (the driver has no such method).
//
// Over TLS, MySQL expects the full authentication of caching_sha2_password
// (asked for an account the server has not cached since it started) to
// send the password as it is, and the prober does, within the same rule.
// sha256_password over TLS is refused with probes.ReasonAuth before the
// login: the driver cannot answer it there.
//
// # Hostile servers
//
// The driver trusts its server: it allocates whatever a packet header
// claims (up to 16 MiB, and joins continued packets without limit) and as
// many column descriptions as a result announces, and a few malformed
// packets make it panic. The prober follows the server's packets as the
// driver will read them and refuses, with probes.ReasonProtocol, before the
// driver sees it: a packet of more than 64 KiB (8 KiB while logging in: a
// greeting, an authentication request, a key), more than 256 KiB in one
// probe (a health query answers one small row), a result of more than 4096
// columns, a request for a local file (LOAD DATA LOCAL INFILE), and the
// malformed greetings, OK and EOF packets, method switches and public keys
// that would make the driver index past their end. A panic of the driver
// that gets through anyway fails the probe instead of the program (while
// logging in, it leaves the driver's watcher goroutine behind, which is
// why the prober refuses all it knows to cause one).
package mysql
