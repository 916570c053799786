// Package probes is a small library of active health probes: TCP and
// HTTP(S) probers, a threshold tracker that turns their results into a
// healthy/unhealthy state, and a scheduler that runs many of them
// periodically. It depends on the standard library only and knows nothing
// of Kubernetes. Protocol probers live in subpackages, so that a program
// links only those it uses: probes/grpchealth (gRPC health), probes/redis
// and probes/mysql; probes/postgresql imports github.com/lib/pq (and so
// registers its database/sql driver) for its importers only.
//
// # Probers
//
// A Prober checks one Target (host and port) per call:
//
//	Probe(ctx context.Context, target Target) Result
//
// The context's deadline is the probe's timeout (DefaultTimeout when it has
// none) and its cancellation aborts the probe. A Result carries a Status
// (Success or Failure), a machine-readable Reason (ReasonRefused,
// ReasonTimeout, ReasonHTTPStatus, ReasonAuth, ...), a human Message, the
// probe's Latency and, for failures, the underlying error. A configuration
// that cannot work is rejected by the constructor (NewTCP, NewHTTP,
// postgresql.New), never reported as a probe failure. Probers are safe for
// concurrent use; build one per configuration and probe any number of
// targets with it.
//
// Every prober dials through an injectable Dialer (a *net.Dialer by default)
// and opens one connection per probe, which it closes before returning:
//
//   - TCPProber connects and closes, writing nothing. It closes with a reset
//     (SO_LINGER 0) so that frequent probes leave no TIME_WAIT sockets. With
//     Steps it holds a short conversation instead (an SMTP banner, a Redis
//     PING): each step sends bytes and expects a literal or an RE2 regular
//     expression in what arrives, optionally inside TLS.
//   - HTTPProber sends one GET or HEAD without keep-alive, does not follow
//     redirects, reads at most a small part of the body and passes on the
//     expected status codes (200-399 by default; see ParseStatusCodes) and,
//     with ExpectBody, a match within the body's first KiB.
//   - postgresql.Prober logs in (with TLS modes disable, require, verify-ca
//     and verify-full, certificates in memory), runs a query and passes when
//     it completes and its first column, if any, is not false.
//
// A Prober written elsewhere returns the same Results: Classify gives the
// reason of a connection error as these probers do, and CutMessage bounds a
// message as they do.
//
// # Hostile servers
//
// A probe costs a bounded amount of memory and time whatever the server
// sends: the context's deadline closes the socket in any phase; HTTP reads
// at most 64 KiB of headers and a few KiB of body (at most 64 KiB searched
// by ExpectBody); a TCP script reads at most MaxExpectBytes per step;
// PostgreSQL checks every
// message before lib/pq parses it (see package postgresql). A Result's
// Message holds at most MaxMessageBytes.
//
// # Thresholds and scheduling
//
// A Tracker applies success and failure thresholds to consecutive results,
// as kubelet does. A Scheduler runs jobs (a prober, a target, a period, a
// timeout, an initial delay) under keys of any comparable type, with jitter,
// bounded concurrency and no overlap of a key with itself, and delivers
// results to a callback. It keeps all keys in timer heaps served by one
// goroutine, so tens of thousands of keys cost little more than their
// probes. Jobs may name a group (a tenant, say) and the Scheduler bound the
// probes in flight of one group (SchedulerOptions.MaxConcurrentPerGroup),
// so that one group's probes hanging against servers that never answer
// cannot take every slot: the other groups' probes still run on time.
//
// Timing adapts to the verdict as HAProxy's fastinter and downinter do:
// OnResult passes a key's Tracker.Pace to Scheduler.SetPace, and the key is
// probed every Job.FastPeriod while its results disagree with the verdict
// (so a failing target is declared down in a few fast periods, not
// thresholds × Period), every Job.DownPeriod while a target that was
// healthy is down, and every Period otherwise. Due times stay on the grid
// of the key's first probe, so that keys added together are probed
// together whatever their paces went through.
package probes
