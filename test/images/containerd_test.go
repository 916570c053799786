package images_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swh-dev/swh/test/harness"
	"github.com/swh-dev/swh/test/harness/process"
	"github.com/swh-dev/swh/test/images"
)

// containerdConfig runs a private containerd that only stores images: no
// CRI, only the native snapshotter (an unpack copies files and mounts
// nothing), nothing under /opt; its root, state and sockets in DIR.
const containerdConfig = `version = 2
root = "%[1]s/root"
state = "%[1]s/state"
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.overlayfs",
  "io.containerd.snapshotter.v1.zfs",
]
[grpc]
  address = "%[1]s/containerd.sock"
[ttrpc]
  address = "%[1]s/containerd.sock.ttrpc"
`

// testContainerdImport imports every tarball into a private containerd, as
// the real-node harness does, and finds each image under its reference and
// digest. containerd and ctr come from Debian's containerd package, which
// make test installs; without them the check is skipped, except in CI.
func testContainerdImport(t *testing.T, results []images.Result) {
	containerd, err1 := exec.LookPath("containerd")
	ctr, err2 := exec.LookPath("ctr")
	if err1 != nil || err2 != nil {
		msg := "containerd or ctr is not installed (apt-get install containerd): the import is not checked"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(config, fmt.Appendf(nil, containerdConfig, dir), 0o644); err != nil {
		t.Fatal(err)
	}
	var log harness.Buffer
	daemon, err := process.Start(process.Spec{Name: "containerd", Path: containerd, Args: []string{"--config", config}, Output: &log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		daemon.Stop()
		if t.Failed() {
			t.Logf("containerd's log:\n%s", log.String())
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	address := filepath.Join(dir, "containerd.sock")
	run := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, ctr, append([]string{"--address", address, "--namespace", "k8s.io"}, args...)...)
		cmd.Env = append(os.Environ(), "CONTAINERD_SNAPSHOTTER=native")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for began := time.Now(); ; {
		if _, err := run("version"); err == nil {
			break
		}
		select {
		case <-daemon.Exited():
			t.Fatalf("containerd exited: %v", daemon.Err())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Since(began) > 30*time.Second {
			t.Fatal("containerd does not answer after 30s")
		}
	}

	for _, r := range results {
		began := time.Now()
		if out, err := run("images", "import", r.File); err != nil {
			t.Fatalf("ctr images import %s: %v\n%s", r.File, err, out)
		}
		t.Logf("imported %s in %s", r.Ref, time.Since(began).Round(10*time.Millisecond))
	}
	out, err := run("images", "ls")
	if err != nil {
		t.Fatalf("ctr images ls: %v\n%s", err, out)
	}
	listed := map[string]string{} // reference -> digest
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 3 {
			listed[f[0]] = f[2]
		}
	}
	for _, r := range results {
		if got := listed[r.Ref]; got != r.Digest.String() {
			t.Errorf("containerd lists %s as %q, want %s:\n%s", r.Ref, got, r.Digest, out)
		}
	}
}
