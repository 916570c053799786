package main

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// forward accepts connections on l (the host's 127.0.0.1 port, handed over
// by the host side) and relays each to the API server at apiAddr on the
// namespace's loopback. Bytes pass through untouched: TLS runs between
// kubectl and kube-apiserver. It returns when ctx ends or l is closed, after
// closing the connections it relays.
func forward(ctx context.Context, l net.Listener, apiAddr string) {
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		wg    sync.WaitGroup
	)
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = struct{}{}
		} else {
			delete(conns, c)
		}
	}
	go func() {
		<-ctx.Done()
		_ = l.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	}()
	defer wg.Wait()
	for {
		client, err := l.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			dialer := net.Dialer{Timeout: 5 * time.Second}
			server, err := dialer.DialContext(ctx, "tcp", apiAddr)
			if err != nil {
				_ = client.Close()
				return
			}
			track(client, true)
			track(server, true)
			relay(client, server)
			track(client, false)
			track(server, false)
		}()
	}
}

// relay copies both ways until both directions are done, passing on
// half-closes, then closes both connections.
func relay(a, b net.Conn) {
	var wg sync.WaitGroup
	copyHalf := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tcp, ok := dst.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	wg.Add(2)
	go copyHalf(a, b)
	go copyHalf(b, a)
	wg.Wait()
	_ = a.Close()
	_ = b.Close()
}
