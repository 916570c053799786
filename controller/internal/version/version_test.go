package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	version = "v9.8.7"
	t.Cleanup(func() { version = "" })
	got := String("swh-controller")
	if !strings.HasPrefix(got, "swh-controller v9.8.7 (revision ") || !strings.HasSuffix(got, ", "+runtime.Version()+")") {
		t.Errorf("String = %q, want swh-controller v9.8.7 (revision REV, %s)", got, runtime.Version())
	}
}

// TestVersionUnstamped: without a stamp the version is the go command's
// record of the main module, or "dev"; never empty.
func TestVersionUnstamped(t *testing.T) {
	if got := Version(); got == "" || strings.ContainsAny(got, " ()") {
		t.Errorf("Version = %q, want a version or dev", got)
	}
}
