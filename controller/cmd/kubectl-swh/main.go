// Command kubectl-swh is the kubectl plugin of swh: `kubectl swh status
// NAME` and `kubectl swh why NAME POD` tell which pod receives traffic on
// which port of a ServiceWithHealthchecks, and why not. Put it on the PATH
// (from a clone: cd controller && go install ./cmd/kubectl-swh) and kubectl
// finds it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/swh-dev/swh/controller/kubectlswh"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := kubectlswh.Run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		stop()
		os.Exit(1)
	}
}
