// Command swh-pause is the pod sandbox ("pause") program of the real-node
// cluster, shipped as registry.k8s.io/pause:3.10 by make images because no
// registry is reachable to pull the real one: it holds the pod's namespaces
// by sleeping until SIGTERM or SIGINT, and reaps the zombies of a pod that
// shares its process namespace, as kubernetes' pause.c does.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "pause: %s, exiting\n", sig)
			return
		}
		reap()
	}
}

// reap waits for every child that has exited, without blocking.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
