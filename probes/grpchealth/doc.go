// Package grpchealth is the gRPC health-check prober of the probes library:
// it calls grpc.health.v1.Health/Check (the standard health protocol of
// gRPC, the one Kubernetes' gRPC probes call) and passes when the server
// answers SERVING. It returns probes.Result values with the reasons of
// package probes and runs under a probes.Scheduler like any other
// probes.Prober.
//
// Build a Prober per configuration with New; a configuration that cannot
// work (a CA without TLS, a CA with InsecureSkipVerify, a certificate
// without its key, reserved or malformed metadata) is refused there. Each
// probe opens exactly one connection, through the Config's Dialer, makes
// one call on it and closes it (with a reset, as the probes package's
// probers do, so that frequent probes leave no TIME_WAIT sockets). The
// context's deadline (probes.DefaultTimeout when it has none) bounds the
// whole probe and is sent to the server as grpc-timeout.
//
// # Protocol
//
// The probe is one unary call over the standard library's HTTP/2: h2c
// with prior knowledge without TLS, or TLS with ALPN "h2" (a server that
// does not agree to h2 fails the probe). The request carries
// content-type application/grpc, te: trailers, a user-agent, grpc-timeout
// and the Config's Metadata, and one uncompressed HealthCheckRequest. The
// package depends on the standard library only, as package probes does,
// and not on google.golang.org/grpc: a grpc-go client builds a ClientConn
// with a resolver, a balancer and several goroutines per connection, and
// a probe is one request on one connection; net/http's HTTP/2 does that
// far more cheaply, and every byte the prober reads is bounded by it
// (see Bounds). The two protobuf messages of health.proto are encoded and
// decoded by hand.
//
// # Results
//
// A probe passes, with probes.ReasonOK, on status 0 (OK) with one
// HealthCheckResponse whose status is SERVING. Otherwise it fails with:
//
//   - probes.ReasonGRPCNotServing: NOT_SERVING, UNKNOWN or a status
//     health.proto does not define (Err is a *NotServingError);
//   - probes.ReasonGRPCServiceUnknown: SERVICE_UNKNOWN, or gRPC status 5
//     NOT_FOUND, which grpc-go's health server answers for a service it
//     does not know;
//   - probes.ReasonGRPCUnimplemented: status 12 UNIMPLEMENTED, a server
//     without the health service;
//   - probes.ReasonAuth: status 16 UNAUTHENTICATED;
//   - probes.ReasonGRPCStatus: any other status (Err is a *StatusError with
//     the code and grpc-message, which the message shows too);
//   - probes.ReasonProtocol: not a gRPC answer: an HTTP status other than
//     200, a content type other than application/grpc (or +proto), no
//     grpc-status, a compressed or oversized message, more than one
//     message, a malformed HealthCheckResponse, an HTTP/1 server, an HTTP/2
//     protocol error, a TLS server without h2;
//   - probes.ReasonTLS: a failed TLS handshake (verification, a server
//     closing the connection during it), or a TLS 1.3 server that asked
//     for a client certificate and closed the connection before
//     answering: in TLS 1.3 the server judges the client's certificate
//     after the client's handshake is over, and its alert may lose the
//     race with the request;
//   - the connection reasons of probes.Classify: refused, timeout,
//     canceled, reset (the server closed the connection or reset the
//     stream, GOAWAY included), unreachable, dns.
//
// Messages say what was found, e.g. `gRPC health of service "foo" on
// 10.0.0.1:50051: NOT_SERVING`.
//
// # Bounds
//
// Whatever the server sends, a probe reads at most MaxResponseHeaderBytes
// of header and trailer fields (HTTP/2's SETTINGS_MAX_HEADER_LIST_SIZE,
// enforced by net/http, which also cuts a CONTINUATION flood short), HTTP/2
// frames of at most 16 KiB, at most 16 KiB of data the prober has not read
// yet (the stream's flow-control window; 64 KiB for the connection), and
// a message of at most MaxResponseMessageBytes, whose declared length is
// checked before any of it is read. It keeps at most a few hundred bytes
// of grpc-message, and a Result's Message holds at most
// probes.MaxMessageBytes. Frames that carry nothing (empty DATA, PING) are
// processed until the deadline, which bounds them.
package grpchealth
