// Package postgresql is the PostgreSQL prober of the probes library: it logs
// in, runs a query and passes when the query completes and its first
// column, if any, is not false. It returns probes.Result values with the
// reasons of package probes (probes.ReasonAuth, probes.ReasonDBMissing,
// probes.ReasonQueryFalse, ...) and runs under a probes.Scheduler like any
// other probes.Prober.
//
// It is a package of its own because it speaks the protocol through
// github.com/lib/pq, whose init registers the "postgres" database/sql driver
// in every program that links it: importing package probes for the TCP and
// HTTP probers does not.
//
// Build a Prober per configuration with New; a configuration that cannot
// work (no user, an unknown SSLMode, verify-ca without a CA, a certificate
// without its key) is refused there. Each probe opens exactly one
// connection, through the Config's Dialer, and closes it. The context's
// deadline bounds the whole probe: it is the login's connect timeout, the
// query's statement_timeout on the server and the socket's deadline.
//
// # TLS
//
// SSLMode is required: SSLDisable, SSLRequire, SSLVerifyCA or
// SSLVerifyFull, as libpq's sslmode (require with a CACert verifies the
// chain, as libpq does). The prober negotiates TLS itself, with the
// certificates of the Config held in memory: nothing is read from files,
// from PG* environment variables or from ~/.postgresql.
//
// # Hostile servers
//
// lib/pq trusts its server; the prober checks every message before pq reads
// it. One message may claim at most 64 KiB (an authentication request
// 8 KiB, a plain-text error 1 KiB), everything the server sends in one
// probe at most 256 KiB, and a SCRAM-SHA-256 exchange at most 100,000
// iterations; past these the probe fails with probes.ReasonProtocol (or
// probes.ReasonAuth for the iterations) before pq allocates anything. A
// request for the password in clear text is answered only over a verified
// connection (SSLVerifyCA, SSLVerifyFull, or SSLRequire with CACert) or
// when Config.AllowCleartextPassword is set; otherwise the probe fails with
// probes.ReasonAuth and the password is never sent. MD5 and SCRAM-SHA-256
// never send the password itself and are always answered. A panic of pq on
// a malformed answer fails the probe instead of the program.
package postgresql
