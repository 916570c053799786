// Command swh-sandbox runs the local sandbox: a real kube-apiserver and etcd
// with the ServiceWithHealthchecks CRD installed, and a kubeconfig for
// kubectl. It runs until interrupted, then stops everything it started.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/swh-dev/swh/test/harness"
)

func main() {
	// A flag set of its own: controller-runtime registers -kubeconfig globally.
	flags := flag.NewFlagSet("swh-sandbox", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "_out/sandbox/kubeconfig", "where to write the kubeconfig")
	once := flags.Bool("once", false, "start, print the kubeconfig path, then stop (a smoke check)")
	_ = flags.Parse(os.Args[1:])
	if err := run(*kubeconfig, *once); err != nil {
		fmt.Fprintln(os.Stderr, "swh-sandbox:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, once bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	path, err := filepath.Abs(kubeconfig)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", kubeconfig, err)
	}
	fmt.Println(">> starting kube-apiserver and etcd (bin/), installing the ServiceWithHealthchecks CRD")
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cp, err := harness.StartControlPlane(startCtx, harness.ControlPlaneOptions{KubeconfigPath: path})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println(">> stopping the control plane")
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "swh-sandbox:", err)
		}
		_ = os.Remove(path)
	}()
	fmt.Printf("\nThe sandbox is up. Point kubectl at it:\n\n  export KUBECONFIG=%s\n  kubectl get crd servicewithhealthchecks.network.swh.dev\n  kubectl get swh -A\n\nPress Ctrl-C to stop it.\n", path)
	if once {
		return nil
	}
	<-ctx.Done()
	return nil
}
