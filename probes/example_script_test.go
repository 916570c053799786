package probes_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/swh-dev/swh/probes"
)

// A mail server is healthy when it greets with 220 and answers EHLO with
// 250: a script of two steps, as HAProxy's tcp-check send/expect.
func ExampleTCPProber_script() {
	l, target := loopbackListener()
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprint(c, "220 mail.example.test ESMTP\r\n")
				if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
					fmt.Fprint(c, "250-mail.example.test\r\n250 SIZE 10240000\r\n")
				}
			}()
		}
	}()

	p, err := probes.NewTCP(probes.TCPConfig{Steps: []probes.Step{
		{Expect: &probes.Expect{Regexp: `^220 `}},
		{Send: []byte("EHLO probe.example.test\r\n"), Expect: &probes.Expect{Regexp: `(?m)^250 `}},
	}})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res := p.Probe(ctx, target)
	fmt.Println(res.Status, res.Reason, res.Message)
	// Output:
	// success ok connected, 2 steps as expected
}

// A status of 200 is not enough when the body says what is wrong.
func ExampleHTTPProber_expectBody() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"status":"degraded"}`)
	}))
	defer srv.Close()
	target := probes.TargetFrom(netip.MustParseAddrPort(srv.Listener.Addr().String()))

	p, err := probes.NewHTTP(probes.HTTPConfig{
		Path:       "/health",
		ExpectBody: &probes.Expect{Regexp: `"status":\s*"ok"`}, // searched in the first 1 KiB
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res := p.Probe(ctx, target)
	fmt.Println(res.Status, res.Reason)
	fmt.Println(res.Message)
	// Output:
	// failure body-mismatch
	// HTTP 200 OK: body: expected regexp "\"status\":\\s*\"ok\"", not found in 21 bytes (searched the whole body): got "{\"status\":\"degraded\"}"
}
