package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ControllerManager is a kube-controller-manager process running some of
// upstream's controllers against a ControlPlane: the garbage collector that
// deletes a resource's Service and slices after it, the namespace
// controller, the disruption controller. A cluster always runs them; a test
// or the sandbox that leaves them out behaves like no cluster does.
type ControllerManager struct {
	cmd *exec.Cmd
	log *os.File
	// tempLog: the log is a temporary file Stop removes.
	tempLog bool
	exited  chan struct{}
	err     error
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
	var logFile *os.File
	var err error
	if opts.LogPath != "" {
		logFile, err = os.Create(opts.LogPath)
	} else {
		logFile, err = os.CreateTemp("", "swh-kube-controller-manager-*.log")
	}
	if err != nil {
		return nil, fmt.Errorf("kube-controller-manager's log: %w", err)
	}
	args := append([]string{
		"--kubeconfig=" + cp.Kubeconfig,
		"--controllers=" + strings.Join(opts.Controllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--v=1",
	}, opts.ExtraArgs...)
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Dies with the test binary (a panic or a kill skips the cleanups),
	// as the control plane's processes do.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	m := &ControllerManager{cmd: cmd, log: logFile, tempLog: opts.LogPath == "", exited: make(chan struct{})}
	go func() {
		m.err = cmd.Wait()
		close(m.exited)
	}()
	return m, nil
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
			t.Logf("kube-controller-manager's log, its end:\n%s", m.logTail(4096))
		}
		m.Stop()
	})
	return m
}

// Running reports an error when the process has exited, with the end of
// its log.
func (m *ControllerManager) Running() error {
	select {
	case <-m.exited:
		return fmt.Errorf("kube-controller-manager exited (%v):\n%s", m.err, m.logTail(2000))
	default:
		return nil
	}
}

// logTail returns the last n bytes of the log.
func (m *ControllerManager) logTail(n int) []byte {
	data, _ := os.ReadFile(m.log.Name())
	return data[max(0, len(data)-n):]
}

// Stop ends the process (SIGTERM, then SIGKILL after 10 s) and removes its
// log unless ControllerManagerOptions.LogPath named it.
func (m *ControllerManager) Stop() {
	select {
	case <-m.exited:
	default:
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.exited:
		case <-time.After(10 * time.Second):
			_ = m.cmd.Process.Kill()
			<-m.exited
		}
	}
	_ = m.log.Close()
	if m.tempLog {
		_ = os.Remove(m.log.Name())
	}
}
