// Command swh-sandbox runs the local sandbox (`make run`): a real
// kube-apiserver and etcd with the ServiceWithHealthchecks CRD, the
// controller, one agent for each of three simulated nodes, and workloads
// that show the documented examples on real backends (PostgreSQL
// primary and replicas behind db-read and db-write, web and smtp on one pod,
// a pod-wide health port). Everything runs inside a private network and PID
// namespace; kubectl on the host reaches the API server through a port the
// sandbox forwards from the host's 127.0.0.1.
//
// Usage:
//
//	swh-sandbox [flags]          start the sandbox and show the live view
//	swh-sandbox COMMAND [ARG...] act on a running sandbox (see `swh-sandbox help`)
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// options are the sandbox's flags, shared by the host side and the inner
// process it starts in the namespace.
type options struct {
	// out holds the kubeconfig, the control socket and the logs.
	out string
	// port is the host port forwarded to the API server; 0 picks a free one.
	port int
	// noPostgres skips the database example even when PostgreSQL is here.
	noPostgres bool
	// requirePostgres fails the start when PostgreSQL cannot run.
	requirePostgres bool
	// requireRedis fails the start when Redis cannot run.
	requireRedis bool
	// plain forces the line-oriented output even on a terminal.
	plain bool
}

func (o options) kubeconfig() string { return filepath.Join(o.out, "kubeconfig") }
func (o options) socket() string     { return filepath.Join(o.out, "control.sock") }
func (o options) logDir() string     { return filepath.Join(o.out, "logs") }

// innerArg is the hidden first argument of the process started inside the
// namespace.
const innerArg = "__inner"

func main() {
	// A flag set of its own: controller-runtime registers -kubeconfig globally.
	flags := flag.NewFlagSet("swh-sandbox", flag.ExitOnError)
	var opts options
	flags.StringVar(&opts.out, "out", "_out/sandbox", "folder of the kubeconfig, the control socket and the logs")
	flags.IntVar(&opts.port, "port", 16443, "host port (on 127.0.0.1) forwarded to the API server; a free one is used when it is taken, 0 always picks a free one")
	flags.BoolVar(&opts.noPostgres, "no-postgres", false, "skip the PostgreSQL example")
	flags.BoolVar(&opts.requirePostgres, "require-postgres", false, "fail when PostgreSQL cannot run instead of skipping its example")
	flags.BoolVar(&opts.requireRedis, "require-redis", false, "fail when Redis cannot run instead of skipping its example")
	flags.BoolVar(&opts.plain, "plain", false, "line-oriented output even on a terminal (what it prints when stdout is not one)")
	flags.Usage = func() {
		fmt.Fprintf(flags.Output(), "usage: swh-sandbox [flags]            start the sandbox\n       swh-sandbox [-out DIR] COMMAND   act on a running one\n\n%s\nflags:\n", commandHelp)
		flags.PrintDefaults()
	}
	args := os.Args[1:]
	inner := len(args) > 0 && args[0] == innerArg
	if inner {
		args = args[1:]
	}
	_ = flags.Parse(args)
	abs, err := filepath.Abs(opts.out)
	if err != nil {
		fail(fmt.Errorf("resolving %s: %w", opts.out, err))
	}
	opts.out = abs

	switch {
	case inner:
		err = runInner(opts)
	case flags.NArg() > 0:
		err = runClient(opts, strings.Join(flags.Args(), " "))
	default:
		err = runHost(opts)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "swh-sandbox:", err)
	os.Exit(1)
}
