package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swh-dev/swh/test/harness/process"
)

// ControllerManager is a kube-controller-manager process running some of
// upstream's controllers against a ControlPlane: the garbage collector that
// deletes a resource's Service and slices after it, the namespace
// controller, the disruption controller. A cluster always runs them; a test
// or the sandbox that leaves them out behaves like no cluster does.
type ControllerManager struct {
	proc *process.Proc
	// tempLog: the log is a temporary file Stop removes.
	tempLog bool
}

// ControllerManagerOptions configures StartControllerManager.
type ControllerManagerOptions struct {
	// Controllers are the names given to --controllers, for example
	// "garbagecollector" and "namespace".
	Controllers []string
	// BinDir holds kube-controller-manager; empty means BinDir().
	BinDir string
	// LogPath is where its output goes; empty means a temporary file
	// removed on Stop.
	LogPath string
	// ExtraArgs are added to its command line.
	ExtraArgs []string
}

// StartControllerManager starts kube-controller-manager with the controllers
// asked for, as the control plane's administrator, without leader election
// or a serving port.
func StartControllerManager(cp *ControlPlane, opts ControllerManagerOptions) (*ControllerManager, error) {
	if len(opts.Controllers) == 0 {
		return nil, errors.New("kube-controller-manager: no controllers asked for")
	}
	bin := opts.BinDir
	if bin == "" {
		var err error
		if bin, err = BinDir(); err != nil {
			return nil, err
		}
	}
	path := filepath.Join(bin, "kube-controller-manager")
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%w: %s (hack/build-tools.sh kube-controller-manager)", ErrMissingDependency, path)
	}
	logPath := opts.LogPath
	if logPath != "" {
		// A fresh log, as each run of the sandbox wants.
		if err := os.Remove(logPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("kube-controller-manager's log: %w", err)
		}
	} else {
		f, err := os.CreateTemp("", "swh-kube-controller-manager-*.log")
		if err != nil {
			return nil, fmt.Errorf("kube-controller-manager's log: %w", err)
		}
		_ = f.Close()
		logPath = f.Name()
	}
	args := append([]string{
		"--kubeconfig=" + cp.Kubeconfig,
		"--controllers=" + strings.Join(opts.Controllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--v=1",
	}, opts.ExtraArgs...)
	// Dies with the test binary, as the control plane's processes do.
	proc, err := process.Start(process.Spec{Name: "kube-controller-manager", Path: path, Args: args, Log: logPath, DiesWithSuite: true})
	if err != nil {
		if opts.LogPath == "" {
			_ = os.Remove(logPath)
		}
		return nil, err
	}
	return &ControllerManager{proc: proc, tempLog: opts.LogPath == ""}, nil
}

// StartTestControllerManager starts kube-controller-manager with the
// controllers asked for until the test ends, and logs the end of its log
// when the test failed. A missing binary is Unavailable (a failure in CI).
func StartTestControllerManager(t testing.TB, cp *ControlPlane, controllers ...string) *ControllerManager {
	t.Helper()
	m, err := StartControllerManager(cp, ControllerManagerOptions{Controllers: controllers})
	if err != nil {
		if errors.Is(err, ErrMissingDependency) {
			Unavailable(t, err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-controller-manager's log, its end:\n%s", m.proc.LogTail(60))
		}
		m.Stop()
	})
	return m
}

// Running reports an error when the process has exited, with the end of
// its log.
func (m *ControllerManager) Running() error {
	if m.proc.Running() {
		return nil
	}
	return fmt.Errorf("kube-controller-manager exited (%v):\n%s", m.proc.Err(), m.proc.LogTail(30))
}

// Stop ends the process (SIGTERM, then SIGKILL after 10 s) and removes its
// log unless ControllerManagerOptions.LogPath named it.
func (m *ControllerManager) Stop() {
	m.proc.Stop()
	if m.tempLog {
		_ = os.Remove(m.proc.Log)
	}
}
