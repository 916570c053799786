package postgresql_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/postgresql"
)

func Example() {
	p, err := postgresql.New(postgresql.Config{
		DBName:   "app",
		User:     "probe",
		Password: "secret",
		// Passes on the primary only.
		Query:   "SELECT NOT pg_is_in_recovery()",
		SSLMode: postgresql.SSLRequire, // or SSLVerifyFull with CACert
	})
	if err != nil {
		panic(err)
	}

	// Nothing listens there: the probe fails with a reason to act upon.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	target := probes.TargetFrom(l.Addr().(*net.TCPAddr).AddrPort())
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res := p.Probe(ctx, target)
	fmt.Println(res.Status, res.Reason)

	// A configuration that cannot work is refused up front.
	_, err = postgresql.New(postgresql.Config{User: "probe", SSLMode: postgresql.SSLVerifyCA})
	fmt.Println(err)
	// Output:
	// failure refused
	// postgresql: verify-ca needs CACert
}

func ExampleSSLMode_Validate() {
	// Modes read from a configuration file, say.
	for _, s := range []string{"verify-full", "prefer", ""} {
		fmt.Println(postgresql.SSLMode(s).Validate())
	}
	// Output:
	// <nil>
	// postgresql: SSL mode "prefer" is not disable, require, verify-ca or verify-full
	// postgresql: SSL mode is required: disable, require, verify-ca or verify-full
}
