package redis_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/redis"
)

// serveMaster stands in for a Redis master without replicas: whatever it
// reads, it answers PING and ROLE.
func serveMaster(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 512)
			if _, err := c.Read(buf); err != nil {
				return
			}
			_, _ = io.WriteString(c, "+PONG\r\n*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n")
			_, _ = io.Copy(io.Discard, c) // until the probe closes
		}()
	}
}

func Example() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	go serveMaster(l)
	target := probes.TargetFrom(l.Addr().(*net.TCPAddr).AddrPort())

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// The probe of a Service that sends writes: masters only.
	master, err := redis.New(redis.Config{TLSMode: redis.TLSDisable, Role: redis.RoleMaster})
	if err != nil {
		panic(err)
	}
	res := master.Probe(ctx, target)
	fmt.Println(res.Status, res.Reason, res.Message)

	// The probe of a Service that sends reads to replicas.
	replica, err := redis.New(redis.Config{TLSMode: redis.TLSDisable, Role: redis.RoleReplica})
	if err != nil {
		panic(err)
	}
	res = replica.Probe(ctx, target)
	fmt.Println(res.Status, res.Reason)

	// A password goes only to a verified server, unless allowed: this
	// probe fails without connecting.
	secret, err := redis.New(redis.Config{TLSMode: redis.TLSRequire, Password: "s3cret"})
	if err != nil {
		panic(err)
	}
	fmt.Println(secret.Probe(ctx, target).Reason)

	// A configuration that cannot work is refused up front.
	_, err = redis.New(redis.Config{TLSMode: redis.TLSVerifyCA})
	fmt.Println(err)
	// Output:
	// success ok master with 0 replicas
	// failure wrong-role
	// auth
	// redis: verify-ca needs CACert
}

func ExampleTLSMode_Validate() {
	// Modes read from a configuration file, say.
	for _, s := range []string{"verify-full", "prefer", ""} {
		fmt.Println(redis.TLSMode(s).Validate())
	}
	// Output:
	// <nil>
	// redis: TLS mode "prefer" is not disable, require, verify-ca or verify-full
	// redis: TLS mode is required: disable, require, verify-ca or verify-full
}
