package release_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAPIDiffReportsBreak: the compatibility check of make verify
// (hack/apidiff.sh) reports an exported function that a change removes from
// a library, and exits 3, the code verify fails on in a patch release.
func TestAPIDiffReportsBreak(t *testing.T) {
	dir := t.TempDir()
	old, cur := filepath.Join(dir, "old"), filepath.Join(dir, "new")
	for _, d := range []string{old, cur} {
		if err := os.CopyFS(d, os.DirFS(filepath.Join(root, "probes"))); err != nil {
			t.Fatal(err)
		}
	}
	gone := "package probes\n\n// Gone is what the change removes.\nfunc Gone() {}\n"
	if err := os.WriteFile(filepath.Join(old, "gone.go"), []byte(gone), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", filepath.Join(root, "hack/apidiff.sh"), "compare", old, cur, prefix+"probes").CombinedOutput()
	if code := exitCode(err); code != 3 {
		t.Errorf("apidiff.sh compare exited %d (%v), want 3 for an incompatible change:\n%s", code, err, out)
	}
	if !strings.Contains(string(out), "Gone: removed") {
		t.Errorf("the report does not name the removed function:\n%s", out)
	}

	// The same module on both sides: nothing to report, exit 0.
	out, err = exec.Command("bash", filepath.Join(root, "hack/apidiff.sh"), "compare", cur, cur, prefix+"probes").CombinedOutput()
	if err != nil || strings.Contains(string(out), "Incompatible") {
		t.Errorf("apidiff.sh compare of a module with itself: %v\n%s", err, out)
	}
}

// TestAPIDiffPolicy: which release may break the API (VERSIONING.md).
func TestAPIDiffPolicy(t *testing.T) {
	for _, tc := range []struct {
		last, next string
		may        bool
	}{
		{"v0.1.0", "v0.1.1", false}, // a patch never breaks
		{"v0.1.0", "v0.1.0", false}, // not bumped yet: the next release is a patch
		{"v0.1.3", "v0.2.0", true},  // v0: a minor may break
		{"v1.2.0", "v1.3.0", false},
		{"v1.2.0", "v2.0.0", true},
	} {
		err := exec.Command("bash", filepath.Join(root, "hack/apidiff.sh"), "may-break", tc.last, tc.next).Run()
		if got := err == nil; got != tc.may {
			t.Errorf("may-break %s → %s = %v, want %v", tc.last, tc.next, got, tc.may)
		}
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if e, ok := err.(*exec.ExitError); ok {
		return e.ExitCode()
	}
	return -1
}
