package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/swh-dev/swh/api/crd"
	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness/process"
)

// ControlPlane is a running kube-apiserver and etcd with the
// ServiceWithHealthchecks CRD installed.
type ControlPlane struct {
	env *envtest.Environment
	// Config reaches the API server as a cluster administrator.
	Config *rest.Config
	// Client is a controller-runtime client with the core and swh types.
	Client client.Client
	// Scheme knows the core and swh types.
	Scheme *runtime.Scheme
	// Kubeconfig is the path of a kubeconfig file kubectl can use.
	Kubeconfig string
	// CAFile is the CA that signed the serving certificate when
	// ControlPlaneOptions.ServingNames was set (kube-controller-manager's
	// --root-ca-file); empty otherwise.
	CAFile string
	// restarted holds kube-apiserver processes RestartAPIServer started;
	// envtest does not know them, so Stop ends them first.
	restarted []*process.Proc
}

// ControlPlaneOptions configures StartControlPlane.
type ControlPlaneOptions struct {
	// BinDir holds kube-apiserver and etcd; empty means the repository's bin/.
	BinDir string
	// KubeconfigPath is where to write a kubeconfig; empty means a file next
	// to the control plane's own data, removed on Stop.
	KubeconfigPath string
	// ExtraAPIServerFlags are set on kube-apiserver, for example
	// "service-cluster-ip-range".
	ExtraAPIServerFlags map[string]string
	// APIServerAddress is the IP kube-apiserver listens on (a free port is
	// picked on it); empty means loopback. The serving certificate and the
	// kubeconfigs name this address, so other network namespaces can reach
	// the server through it.
	APIServerAddress string
	// ServingNames, when set, are extra names (DNS names or IPs) of the
	// serving certificate, for example the kubernetes Service's ClusterIP
	// that pods of a real-node cluster reach the server through; the
	// certificate is then signed by a CA of the harness, in CAFile.
	ServingNames []string
}

// NewScheme returns a scheme with the core Kubernetes types and the swh API.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("adding core types: %w", err)
	}
	if err := swhv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("adding swh types: %w", err)
	}
	return scheme, nil
}

// CRD returns the ServiceWithHealthchecks CRD as committed in the api module.
func CRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	out := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(crd.ServiceWithHealthchecksYAML(), out); err != nil {
		return nil, fmt.Errorf("decoding the embedded CRD: %w", err)
	}
	return out, nil
}

// StartControlPlane starts etcd and kube-apiserver from BinDir, installs the
// CRD and waits until it is served. Call Stop when done.
func StartControlPlane(ctx context.Context, opts ControlPlaneOptions) (*ControlPlane, error) {
	binDir := opts.BinDir
	if binDir == "" {
		dir, err := BinDir()
		if err != nil {
			return nil, err
		}
		binDir = dir
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			return nil, fmt.Errorf("%w: %s not found in %s (run `make tools`)", ErrMissingDependency, name, binDir)
		}
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	def, err := CRD()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    binDir,
		CRDs:                     []*apiextensionsv1.CustomResourceDefinition{def},
		ErrorIfCRDPathMissing:    true,
		Scheme:                   scheme,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	apiServer := env.ControlPlane.GetAPIServer()
	if opts.APIServerAddress != "" {
		port, err := freePort(opts.APIServerAddress)
		if err != nil {
			return nil, err
		}
		apiServer.SecureServing.Address = opts.APIServerAddress
		apiServer.SecureServing.Port = strconv.Itoa(port)
	}
	var caFile string
	if len(opts.ServingNames) > 0 {
		var err error
		if caFile, err = servingCertificate(apiServer, opts); err != nil {
			return nil, err
		}
	}
	// envtest removes only a certificate folder it made itself.
	removeCerts := func() error {
		if caFile == "" {
			return nil
		}
		return os.RemoveAll(filepath.Dir(caFile))
	}
	for name, value := range opts.ExtraAPIServerFlags {
		apiServer.Configure().Set(name, value)
	}
	cfg, err := env.Start()
	if err != nil {
		// Start leaves the processes running when a later step (installing
		// the CRD) fails.
		return nil, errors.Join(fmt.Errorf("starting kube-apiserver and etcd from %s: %w", binDir, err), env.Stop(), removeCerts())
	}
	cp := &ControlPlane{env: env, Config: cfg, Scheme: scheme, CAFile: caFile}
	cp.Client, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("creating a client: %w", err), cp.Stop())
	}
	cp.Kubeconfig = opts.KubeconfigPath
	if cp.Kubeconfig == "" {
		cp.Kubeconfig = filepath.Join(env.ControlPlane.APIServer.CertDir, "kubeconfig")
	}
	if err := cp.writeKubeconfig(); err != nil {
		return nil, errors.Join(err, cp.Stop())
	}
	if err := EnsureNamespace(ctx, cp.Client, metav1.NamespaceDefault); err != nil {
		return nil, errors.Join(err, cp.Stop())
	}
	return cp, nil
}

// Stop stops kube-apiserver and etcd and removes their data.
func (cp *ControlPlane) Stop() error {
	for _, p := range cp.restarted {
		p.Stop()
	}
	if err := cp.env.Stop(); err != nil {
		return fmt.Errorf("stopping the control plane: %w", err)
	}
	if cp.CAFile != "" {
		// envtest removes only a certificate folder it made itself.
		if err := os.RemoveAll(filepath.Dir(cp.CAFile)); err != nil {
			return fmt.Errorf("removing the serving certificate: %w", err)
		}
	}
	return nil
}

func (cp *ControlPlane) writeKubeconfig() error {
	return cp.WriteUserKubeconfig(cp.Kubeconfig, "swh-admin", "system:masters")
}

// WriteUserKubeconfig writes to path a kubeconfig that authenticates as user
// (and groups) with a client certificate signed by the API server's client
// CA, for example "system:kube-proxy", which the bootstrap RBAC policy binds
// to system:node-proxier.
func (cp *ControlPlane) WriteUserKubeconfig(path, user string, groups ...string) error {
	u, err := cp.env.ControlPlane.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		return fmt.Errorf("adding the user %s: %w", user, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		return fmt.Errorf("rendering the kubeconfig of %s: %w", user, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating the kubeconfig's folder: %w", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing the kubeconfig of %s: %w", user, err)
	}
	return nil
}

// freePort returns a TCP port that is free on ip.
func freePort(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port on %s: %w", ip, err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// EnsureNamespace creates a namespace and its default ServiceAccount (no
// controller-manager runs here to create it, and the ServiceAccount
// admission plugin rejects pods without it). Existing objects are fine.
func EnsureNamespace(ctx context.Context, c client.Client, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: name}}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the default ServiceAccount of %s: %w", name, err)
	}
	return nil
}

// StartTestControlPlane starts a control plane for a test and stops it when
// the test ends. Outside CI a missing binary skips the test; in CI it fails.
func StartTestControlPlane(t testing.TB) *ControlPlane {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := StartControlPlane(ctx, ControlPlaneOptions{})
	if err != nil {
		Unavailable(t, err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return cp
}

// TestNamespace creates a namespace with a unique name for the test.
func (cp *ControlPlane) TestNamespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	ctx := context.Background()
	if err := cp.Client.Create(ctx, ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	if err := EnsureNamespace(ctx, cp.Client, ns.Name); err != nil {
		t.Fatalf("%v", err)
	}
	return ns.Name
}

// CleanNamespace creates a namespace like TestNamespace and, when the test
// ends, deletes what the suites create in it (resources, pods, slices,
// Services). No garbage collector or namespace controller runs here, and a
// later test's controller would otherwise keep reconciling leftovers.
func (cp *ControlPlane) CleanNamespace(t testing.TB) string {
	t.Helper()
	ns := cp.TestNamespace(t)
	t.Cleanup(func() {
		ctx := context.Background()
		_ = cp.Client.DeleteAllOf(ctx, &swhv1alpha1.ServiceWithHealthchecks{}, client.InNamespace(ns))
		_ = cp.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0))
		_ = cp.Client.DeleteAllOf(ctx, &discoveryv1.EndpointSlice{}, client.InNamespace(ns))
		svcs := &corev1.ServiceList{}
		if err := cp.Client.List(ctx, svcs, client.InNamespace(ns)); err == nil {
			for i := range svcs.Items { // Services have no deletecollection
				_ = cp.Client.Delete(ctx, &svcs.Items[i])
			}
		}
	})
	return ns
}

// PauseAPIServer freezes kube-apiserver (SIGSTOP): clients' requests and
// watches hang as with a server that stopped answering. The returned
// function resumes it (SIGCONT).
func (cp *ControlPlane) PauseAPIServer() (resume func() error, err error) {
	pid, err := processWith(cp.env.ControlPlane.APIServer.CertDir, "kube-apiserver")
	if err != nil {
		return nil, err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("stopping kube-apiserver (pid %d): %w", pid, err)
	}
	return func() error {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			return fmt.Errorf("resuming kube-apiserver (pid %d): %w", pid, err)
		}
		return nil
	}, nil
}

// PauseEtcd freezes etcd (SIGSTOP): kube-apiserver's reads and writes hang
// and its watches see nothing new, as with a disk that stopped answering.
// The returned function resumes it (SIGCONT).
func (cp *ControlPlane) PauseEtcd() (resume func() error, err error) {
	pid, err := processWith(cp.env.ControlPlane.Etcd.DataDir, "etcd")
	if err != nil {
		return nil, err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("stopping etcd (pid %d): %w", pid, err)
	}
	return func() error {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			return fmt.Errorf("resuming etcd (pid %d): %w", pid, err)
		}
		return nil
	}, nil
}

// processWith finds the PID of the program whose command line holds both
// words (the control plane's own folders make it unique).
func processWith(word, program string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("listing processes: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if s := string(cmdline); strings.Contains(s, word) && strings.Contains(s, program) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no %s process mentions %s", program, word)
}

// RestartAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after 5 s), waits
// down, and starts it again with the same command line: the same port,
// certificates and etcd, so clients reconnect as after a real restart. It
// returns once the server answers again.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context, down time.Duration) error {
	pid, err := processWith(cp.env.ControlPlane.APIServer.CertDir, "kube-apiserver")
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return fmt.Errorf("reading the command line of kube-apiserver: %w", err)
	}
	argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping kube-apiserver (pid %d): %w", pid, err)
	}
	// A server an earlier restart started is ours no more once stopped
	// (it is reaped as it exits).
	cp.restarted = slices.DeleteFunc(cp.restarted, func(p *process.Proc) bool { return p.PID == pid })
	// kube-apiserver's graceful shutdown waits up to 60 s for connections
	// that carry watches to go idle; after a few seconds it is killed, as a
	// crash would: the clients see the same closed connections either way.
	killAt := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			break
		}
		if !killAt.IsZero() && time.Now().After(killAt) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killAt = time.Time{}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver did not stop: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	time.Sleep(down)
	// Its output goes nowhere, as envtest's own does unless asked.
	server, err := process.Start(process.Spec{Name: "kube-apiserver", Path: argv[0], Args: argv[1:], DiesWithSuite: true})
	if err != nil {
		return err
	}
	cp.restarted = append(cp.restarted, server)
	for {
		err := cp.Client.List(ctx, &corev1.NamespaceList{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not answering after a restart: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// servingCertificate signs kube-apiserver's serving certificate for
// localhost, the listen address and opts.ServingNames into a certificate
// folder envtest then uses as it is; it returns the CA's file.
func servingCertificate(apiServer *envtest.APIServer, opts ControlPlaneOptions) (_ string, err error) {
	dir, err := os.MkdirTemp("", "swh-apiserver-certs-")
	if err != nil {
		return "", fmt.Errorf("creating the certificate folder: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	ca, err := NewCA("swh-test-apiserver-ca")
	if err != nil {
		return "", err
	}
	names := append([]string{"localhost", "127.0.0.1"}, opts.ServingNames...)
	if opts.APIServerAddress != "" {
		names = append(names, opts.APIServerAddress)
	}
	issued, err := ca.Issue(names...)
	if err != nil {
		return "", err
	}
	// envtest makes the ServiceAccount token signer only along with its own
	// serving certificate; any key pair serves (ES256).
	signer, err := ca.Issue("service-account-signer")
	if err != nil {
		return "", err
	}
	caFile := filepath.Join(dir, "serving-ca.crt")
	for file, data := range map[string][]byte{
		"apiserver.crt": issued.CertPEM, "apiserver.key": issued.KeyPEM, "serving-ca.crt": ca.PEM,
		"sa-signer.crt": signer.CertPEM, "sa-signer.key": signer.KeyPEM,
	} {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o600); err != nil {
			return "", fmt.Errorf("writing %s: %w", file, err)
		}
	}
	apiServer.CertDir = dir
	apiServer.SecureServing.CA = ca.PEM
	return caFile, nil
}
