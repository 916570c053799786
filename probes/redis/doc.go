// Package redis is the Redis prober of the probes library: it logs in,
// sends PING and, when asked, checks the server's replication role and a
// replica's lag. It returns probes.Result values with the reasons of
// package probes and runs under a probes.Scheduler like any other
// probes.Prober.
//
// Build a Prober per configuration with New; a configuration that cannot
// work (an unknown TLSMode or Role, verify-ca without a CA, a CA with a
// mode that would not use it, a certificate without its key, a lag bound
// that bounds nothing) is refused there. Each probe opens exactly one
// connection, through the Config's Dialer, sends all its commands at once
// and closes the connection with a reset (no QUIT: it would cost a round
// trip and leave a TIME_WAIT socket). The context's deadline bounds the
// whole probe.
//
// # What a probe checks
//
// In one round trip, a probe sends:
//
//   - AUTH [user] password, when User or Password is set. An error
//     answer fails with probes.ReasonAuth.
//   - PING, always; it passes on PONG. A server loading its dataset
//     (LOADING), a replica refusing stale data (MASTERDOWN) or a server
//     busy with a script (BUSY) fails with probes.ReasonUnavailable, even
//     though it would answer ROLE.
//   - ROLE, with a Role or a MaxReplicationLag. RoleMaster passes on a
//     master; a replica fails with probes.ReasonWrongRole, naming its
//     master. RoleReplica passes on a replica whose link to its master is
//     up ("connected"); a replica connecting or syncing fails with
//     probes.ReasonReplicaLinkDown, a master with probes.ReasonWrongRole.
//     A Sentinel fails either with probes.ReasonWrongRole.
//   - INFO replication, with a MaxReplicationLag. A replica then passes
//     when its link is up and not syncing, the replication stream it has
//     received and not processed is within Bytes, and it last heard from
//     its master within Time; otherwise it fails with
//     probes.ReasonReplicaLinkDown or probes.ReasonReplicationLag, the
//     measured values in the message. A master is never judged for lag.
//
// Other error answers: NOAUTH, WRONGPASS, NOPERM and DENIED (protected
// mode) fail with probes.ReasonAuth; "max number of clients reached" with
// probes.ReasonTooManyConnections; any other (an unknown command on a proxy
// without ROLE, say) with probes.ReasonQueryError: the server speaks RESP
// and refused a command. probes.ReasonProtocol is for answers that are not
// RESP2, not what the command answers, or past a bound. Network failures
// have the reasons of probes.Classify; a failed handshake is
// probes.ReasonTLS.
//
// # TLS and the password
//
// TLSMode is required: TLSDisable, TLSRequire (encrypted, server not
// verified), TLSVerifyCA (chain checked against CACert) or TLSVerifyFull
// (chain, against CACert or the system roots, and the name: ServerName or
// the target's host). Certificates are held in memory; nothing is read
// from files.
//
// AUTH carries the password as it is. Unless the server is verified
// (TLSVerifyCA, TLSVerifyFull) or Config.AllowCleartextPassword is set, a
// probe with a Password fails with probes.ReasonAuth before it connects,
// and the password is never sent: whoever answers on the target's address
// would receive it.
//
// # Hostile servers
//
// The prober reads RESP2 with a reader of its own that checks every claim
// before it allocates: a line holds at most MaxLineBytes, a bulk string
// MaxBulkBytes, an array MaxArrayElements, arrays nest at most MaxNesting
// deep, one probe reads at most MaxValues values and MaxResponseBytes
// bytes. The first breach fails the probe with probes.ReasonProtocol and a
// message naming the bound. A server that sends nothing, or drips, fails
// with probes.ReasonTimeout at the deadline. A Result's Message holds at
// most probes.MaxMessageBytes, whatever the server's text.
//
// # Why no client library
//
// A probe needs three commands and wants every byte bounded. Client
// libraries (go-redis, redigo) pool connections, retry, reconnect, run
// goroutines of their own, and read whatever length a reply claims; making
// one open exactly one connection per probe and refuse a terabyte bulk
// string would cost more code than the reader here (resp.go), and this
// package would no longer depend on the standard library only.
package redis
