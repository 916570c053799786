package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/swh-dev/swh/test/harness"
)

// The descriptors the host side hands to the inner process (exec.Cmd's
// ExtraFiles start at 3).
const (
	fdAPIListener     = 3 // host 127.0.0.1:port, forwarded to the API server
	fdControlListener = 4 // the control socket in the output folder
	fdLifeline        = 5 // read end of a pipe: EOF means stop
)

// readyLine tells the host side that the sandbox is up.
const readyLine = "@@ready"

// runInner is the sandbox inside the private namespace: the control plane,
// the controller, the agents, the backends and the workloads. It runs until
// the lifeline closes (the host side stops or dies), a signal arrives or a
// client asks it to stop, then stops everything and removes its folders.
func runInner(opts options) error {
	// When the host side's unshare dies, so does this process, and with it,
	// as PID 1 of the namespace, every process it started.
	if err := setParentDeathSignal(syscall.SIGKILL); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	// If the host side is gone, writing progress must not kill this process
	// before it has cleaned up.
	signal.Ignore(syscall.SIGPIPE)
	if err := os.MkdirAll(opts.logDir(), 0o755); err != nil {
		return fmt.Errorf("creating the log folder: %w", err)
	}
	logFile, err := os.Create(filepath.Join(opts.logDir(), "sandbox.log"))
	if err != nil {
		return fmt.Errorf("creating the sandbox's log: %w", err)
	}
	defer func() { _ = logFile.Close() }()
	ctrl.SetLogger(zap.New(zap.WriteTo(logFile)))
	lifeline := os.NewFile(fdLifeline, "lifeline")
	go func() {
		_, _ = bufio.NewReader(lifeline).ReadString('\n') // returns at EOF
		cancel()
	}()
	apiListener, err := net.FileListener(os.NewFile(fdAPIListener, "api-listener"))
	if err != nil {
		return fmt.Errorf("taking over the forwarded port: %w", err)
	}
	controlListener, err := net.FileListener(os.NewFile(fdControlListener, "control-listener"))
	if err != nil {
		return fmt.Errorf("taking over the control socket: %w", err)
	}
	// Whatever happens, the temporary folder (TMPDIR, made by the host side
	// for this run) and the kubeconfig go.
	defer func() {
		_ = os.Remove(opts.kubeconfig())
		_ = os.Remove(opts.socket())
		if tmp := os.Getenv("TMPDIR"); strings.HasPrefix(filepath.Base(tmp), tmpPrefix) {
			_ = os.RemoveAll(tmp)
		}
	}()

	err = serve(ctx, cancel, opts, apiListener, controlListener)
	_ = apiListener.Close()
	_ = controlListener.Close()
	return err
}

// serve starts everything, reports readiness and waits for ctx.
func serve(ctx context.Context, stop context.CancelFunc, opts options, apiListener, controlListener net.Listener) error {
	progress("starting kube-apiserver and etcd, installing the ServiceWithHealthchecks CRD")
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cp, err := harness.StartControlPlane(startCtx, harness.ControlPlaneOptions{})
	if err != nil {
		return err
	}
	defer func() {
		progress("stopping kube-apiserver and etcd")
		if err := cp.Stop(); err != nil {
			progress("%v", err)
		}
	}()
	// The controllers every cluster runs that the sandbox's objects need:
	// without the garbage collector a deleted resource leaves its Service
	// and slices behind, and applying it again finds them owned by the
	// deleted one.
	progress("starting kube-controller-manager: the garbage collector and the namespace controller")
	kcm, err := harness.StartControllerManager(cp, harness.ControllerManagerOptions{
		Controllers: []string{"garbagecollector", "namespace"},
		LogPath:     filepath.Join(opts.logDir(), "kube-controller-manager.log"),
	})
	if err != nil {
		return err
	}
	defer func() {
		progress("stopping kube-controller-manager")
		kcm.Stop()
	}()
	apiAddr, err := url.Parse(cp.Config.Host)
	if err != nil {
		return fmt.Errorf("parsing the API server's address %q: %w", cp.Config.Host, err)
	}
	go forward(ctx, apiListener, apiAddr.Host)
	hostPort := apiListener.Addr().(*net.TCPAddr).Port
	if err := writeHostKubeconfig(cp.Kubeconfig, opts.kubeconfig(), hostPort); err != nil {
		return err
	}

	s := newSandbox(cp, opts)
	defer s.close()
	if err := s.start(startCtx); err != nil {
		return err
	}
	go s.serveControl(ctx, stop, controlListener)
	fmt.Println(readyLine)
	<-ctx.Done()
	progress("stopping the agents, the controller and the backends")
	return nil
}

// writeHostKubeconfig copies the control plane's kubeconfig with the server
// address replaced by the forwarded host port. The API server's certificate
// is valid for 127.0.0.1, and TLS runs end to end through the forwarder.
func writeHostKubeconfig(from, to string, port int) error {
	cfg, err := clientcmd.LoadFromFile(from)
	if err != nil {
		return fmt.Errorf("reading the control plane's kubeconfig: %w", err)
	}
	for name, cluster := range cfg.Clusters {
		cluster.Server = fmt.Sprintf("https://127.0.0.1:%d", port)
		delete(cfg.Clusters, name)
		cfg.Clusters["swh-sandbox"] = cluster
	}
	for _, c := range cfg.Contexts {
		c.Cluster = "swh-sandbox"
		c.Namespace = "default"
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return fmt.Errorf("creating the kubeconfig's folder: %w", err)
	}
	// Written aside and renamed: whoever waits for the file sees it whole.
	tmp := to + ".tmp"
	if err := clientcmd.WriteToFile(*cfg, tmp); err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	if err := os.Rename(tmp, to); err != nil {
		return errors.Join(fmt.Errorf("writing the kubeconfig: %w", err), os.Remove(tmp))
	}
	return nil
}

// progress prints one line the host side shows as it is.
func progress(format string, args ...any) {
	fmt.Printf(format+"\n", args...)
}

// setParentDeathSignal asks the kernel to send sig to this process when its
// parent exits.
func setParentDeathSignal(sig syscall.Signal) error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(sig), 0); errno != 0 {
		return fmt.Errorf("setting the parent-death signal: %w", errno)
	}
	return nil
}
