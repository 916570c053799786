package mysql_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/mysql"
)

func Example() {
	p, err := mysql.New(mysql.Config{
		User:     "probe",
		Password: "secret",
		// Passes on a writable server only: 1 on the primary, 0 (false)
		// on a read-only replica.
		Query:   "SELECT @@read_only = 0",
		TLSMode: mysql.TLSRequire, // or TLSVerifyFull with CACert
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	// A server with no connection left says so instead of greeting: an
	// error packet (1040, SQLSTATE 08004).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			body := "\xff\x10\x04#08004Too many connections"
			_, _ = c.Write(append([]byte{byte(len(body)), 0, 0, 0}, body...))
			c.Close()
		}
	}()
	res := p.Probe(ctx, probes.TargetFrom(l.Addr().(*net.TCPAddr).AddrPort()))
	fmt.Println(res.Status, res.Reason)
	fmt.Println(res.Message)

	// A configuration that cannot work is refused up front.
	_, err = mysql.New(mysql.Config{User: "probe", TLSMode: mysql.TLSVerifyCA})
	fmt.Println(err)
	// Output:
	// failure too-many-connections
	// mysql: connect: the server has no connection left for this login (error 1040, SQLSTATE 08004): Too many connections
	// mysql: verify-ca needs CACert
}

func ExampleTLSMode_Validate() {
	// Modes read from a configuration file, say.
	for _, s := range []string{"verify-full", "preferred", ""} {
		fmt.Println(mysql.TLSMode(s).Validate())
	}
	// Output:
	// <nil>
	// mysql: TLS mode "preferred" is not disable, require, verify-ca or verify-full
	// mysql: TLS mode is required: disable, require, verify-ca or verify-full
}
