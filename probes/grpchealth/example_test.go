package grpchealth_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/grpchealth"
)

func Example() {
	// A gRPC health server in a few lines of net/http, on loopback: it
	// knows the service "app", which is SERVING, and answers NOT_FOUND
	// for any other, as grpc-go's health server does.
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: h2c, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1024))
		w.Header().Set("Content-Type", "application/grpc")
		if !bytes.HasSuffix(body, []byte("\x0a\x03app")) { // HealthCheckRequest{service: "app"}
			w.Header().Set("Grpc-Status", "5")
			w.Header().Set("Grpc-Message", "unknown service")
			return
		}
		_, _ = w.Write([]byte{0, 0, 0, 0, 2, 0x08, 1}) // HealthCheckResponse{status: SERVING}
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	defer func() { _ = srv.Close(); <-done }()
	target := probes.TargetFrom(l.Addr().(*net.TCPAddr).AddrPort())

	for _, service := range []string{"app", "billing"} {
		p, err := grpchealth.New(grpchealth.Config{Service: service})
		if err != nil {
			panic(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res := p.Probe(ctx, target)
		cancel()
		fmt.Println(res.Status, res.Reason, strings.ReplaceAll(res.Message, target.Addr(), "ADDR"))
	}

	// A configuration that cannot work is refused up front.
	_, err = grpchealth.New(grpchealth.Config{Metadata: []probes.Header{{Name: "grpc-timeout", Value: "1S"}}})
	fmt.Println(err)
	// Output:
	// success ok gRPC health of service "app" on ADDR: SERVING
	// failure grpc-service-unknown gRPC health of service "billing" on ADDR: status NOT_FOUND (5): unknown service
	// grpchealth: metadata key "grpc-timeout" is reserved for gRPC
}
