package probes

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
)

// TestClassify pins the reasons Classify gives, which probers outside this
// package (probes/postgresql) rely on.
func TestClassify(t *testing.T) {
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)}
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want Reason
	}{
		{"refused", context.Background(), opErr(syscall.ECONNREFUSED), ReasonRefused},
		{"unreachable", context.Background(), opErr(syscall.EHOSTUNREACH), ReasonUnreachable},
		{"reset", context.Background(), opErr(syscall.ECONNRESET), ReasonReset},
		{"EOF", context.Background(), fmt.Errorf("reading: %w", io.EOF), ReasonReset},
		{"dns", context.Background(), &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}, ReasonDNS},
		{"tls", context.Background(), x509.UnknownAuthorityError{}, ReasonTLS},
		{"socket deadline", context.Background(), os.ErrDeadlineExceeded, ReasonTimeout},
		{"the context ended first", canceled, io.EOF, ReasonCanceled},
		{"anything else", context.Background(), errors.New("odd"), ReasonError},
	} {
		if got := Classify(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: Classify(%v) = %s, want %s", tc.name, tc.err, got, tc.want)
		}
	}
}
