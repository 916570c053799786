// Command swh-workload is the backend of the real-node scenarios, shipped as
// the image ghcr.io/swh-dev/swh-workload (make images): HTTP servers that
// answer with the pod's name, a TCP banner server, a switchable failing mode,
// a start that fails until -pass-after has passed, and a graceful, delayed
// shutdown on SIGTERM. GET /checks on an HTTP port lists the health checks
// it answered (time, status, User-Agent), so that a test can tell when each
// prober saw a failure. The image holds no shell, so the commands a pod's
// exec hooks need (fail, recover, sleep) are subcommands of the same binary.
//
// Usage:
//
//	swh-workload [flags]             serve (see -h)
//	swh-workload fail [PORT]         make every HTTP port (or PORT) answer 503
//	swh-workload recover [PORT]      undo fail (both take -fail-file)
//	swh-workload sleep DURATION      sleep, then exit 0 (a preStop hook)
//
// The pod's name comes from $POD_NAME (the downward API), else the host name.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// defaultFailFile is where fail and recover record the failing mode; /tmp is
// writable by the image's user (mode 1777).
const defaultFailFile = "/tmp/swh-workload-fail"

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "swh-workload:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return command(args, stdout)
	}
	fs := flag.NewFlagSet("swh-workload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var httpAddrs, tcpAddrs string
	fs.StringVar(&httpAddrs, "http", ":8080", "comma-separated listen addresses of the HTTP servers (empty: none)")
	fs.StringVar(&tcpAddrs, "tcp", "", "comma-separated listen addresses of the TCP banner servers (\"220 <pod>\\n\")")
	fs.StringVar(&cfg.failFile, "fail-file", defaultFailFile, "while this file exists every HTTP port answers 503; while FILE.PORT exists, that port does")
	fs.BoolVar(&cfg.failing, "fail", false, "start failing (a container whose readiness never passes)")
	fs.DurationVar(&cfg.passAfter, "pass-after", 0, "fail (503) for this long after the start, like a member still catching up after its port opened")
	fs.DurationVar(&cfg.shutdownDelay, "shutdown-delay", 0, "after SIGTERM, keep serving this long before closing the listeners")
	fs.DurationVar(&cfg.drainTimeout, "drain-timeout", 10*time.Second, "after the delay, how long open requests may take to finish")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.http = splitList(httpAddrs)
	cfg.tcp = splitList(tcpAddrs)
	if len(cfg.http)+len(cfg.tcp) == 0 {
		return errors.New("nothing to serve: -http and -tcp are both empty")
	}
	cfg.pod = podName()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return serve(ctx, cfg, stderr)
}

// command runs a subcommand: the exec hooks of a pod whose image has no shell.
func command(args []string, stdout io.Writer) error {
	switch args[0] {
	case "fail", "recover":
		fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
		failFile := fs.String("fail-file", defaultFailFile, "the server's -fail-file")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if fs.NArg() > 1 {
			return fmt.Errorf("usage: swh-workload %s [-fail-file FILE] [PORT]", args[0])
		}
		path := *failFile
		if port := fs.Arg(0); port != "" {
			if _, err := strconv.ParseUint(port, 10, 16); err != nil {
				return fmt.Errorf("port %q: %w", port, err)
			}
			path += "." + port
		}
		if args[0] == "recover" {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			return nil
		}
		return os.WriteFile(path, nil, 0o644)
	case "sleep":
		if len(args) != 2 {
			return errors.New("usage: swh-workload sleep DURATION")
		}
		d, err := time.ParseDuration(args[1])
		if err != nil {
			return err
		}
		time.Sleep(d)
		return nil
	case "help":
		_, err := fmt.Fprintln(stdout, "usage: swh-workload [flags] | fail [-fail-file FILE] [PORT] | recover [-fail-file FILE] [PORT] | sleep DURATION")
		return err
	}
	return fmt.Errorf("unknown command %q (try help)", args[0])
}

func podName() string {
	if name := os.Getenv("POD_NAME"); name != "" {
		return name
	}
	if name, err := os.Hostname(); err == nil {
		return name
	}
	return "unknown"
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
