// Package probes checks the probes library (github.com/swh-dev/swh/probes)
// against real servers started by the test harness on pod addresses inside
// the private network namespace of hack/netns.sh: PostgreSQL primaries and
// streaming replicas (promotion, wrong password, missing database, exhausted
// max_connections, a query past its timeout, TLS modes, a stopped server),
// TCP servers that count the bytes a probe sends, HTTP(S) servers whose
// status, delay and certificate the tests control, grpc-go's own health
// service, redis-server masters and replicas (roles, failover, ACL users,
// lag, TLS) and MariaDB primaries and replicas.
//
// Each test listens on pod addresses the harness gives it (harness.PodIP),
// so that no two tests, here or in other suites, share a server. The
// package holds tests only; run them with `make test`, or alone
// with hack/netns.sh (see hack/test.sh).
package probes
