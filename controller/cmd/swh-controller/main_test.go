package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swh-dev/swh/controller/internal/version"
)

// TestVersionFlag builds swh-controller with the version stamped at link time, as
// the release build does, and runs it with --version: the stamped version
// is printed and the exit status is 0. A renamed version package would
// leave -X writing nothing, silently; this fails instead.
func TestVersionFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "swh-controller")
	build := exec.Command("go", "build", "-ldflags", "-X "+version.Stamped+"=v9.8.7-test", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("swh-controller --version: %v", err)
	}
	if got, want := string(out), "swh-controller v9.8.7-test (revision "; !strings.HasPrefix(got, want) {
		t.Errorf("swh-controller --version printed %q, want %q...", got, want)
	}
}
