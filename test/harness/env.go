package harness

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// ErrMissingDependency marks an error caused by something the machine lacks
// (a binary, the network namespace), as opposed to a failure of the code
// under test.
var ErrMissingDependency = errors.New("missing test dependency")

// InCI reports whether the tests run in CI, where a missing dependency is a
// failure instead of a skip.
func InCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// Unavailable ends the test because err keeps it from running: a skip on a
// developer's machine when err is ErrMissingDependency, a failure in CI or
// for any other error.
func Unavailable(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrMissingDependency) && !InCI() {
		t.Skipf("skipped: %v", err)
	}
	t.Fatalf("%v", err)
}

// RepoRoot returns the repository's top folder: the closest parent of the
// working directory holding go.work.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w: no go.work above the working directory", ErrMissingDependency)
		}
		dir = parent
	}
}

// BinDir returns where the control-plane binaries are: $SWH_BIN_DIR, or
// bin/ at the repository's top.
func BinDir() (string, error) {
	if dir := os.Getenv("SWH_BIN_DIR"); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// SandboxCheckAddress is an address that is bindable only inside the network
// namespace of hack/netns.sh, where 10.244.0.0/16 is local.
const SandboxCheckAddress = "10.244.255.254"

// InNetworkSandbox reports whether the process runs inside the network
// namespace of hack/netns.sh: pod addresses are local there.
func InNetworkSandbox() bool {
	l, err := net.Listen("tcp", net.JoinHostPort(SandboxCheckAddress, "0"))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// RequireNetworkSandbox stops a test that needs pod addresses unless it runs
// inside the network namespace (make test runs it there).
func RequireNetworkSandbox(t testing.TB) {
	t.Helper()
	if !InNetworkSandbox() {
		Unavailable(t, fmt.Errorf("%w: pod addresses in 10.244.0.0/16 are not local; run the suite through `make test` or hack/netns.sh", ErrMissingDependency))
	}
}
