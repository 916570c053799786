package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	version = "v9.8.7"
	t.Cleanup(func() { version = "" })
	got := String("swh-agent")
	if !strings.HasPrefix(got, "swh-agent v9.8.7 (revision ") || !strings.HasSuffix(got, ", "+runtime.Version()+")") {
		t.Errorf("String = %q, want swh-agent v9.8.7 (revision REV, %s)", got, runtime.Version())
	}
}

// TestVersionUnstamped: without a stamp the version is the go command's
// record of the main module, or "dev"; never empty.
func TestVersionUnstamped(t *testing.T) {
	if got := Version(); got == "" || strings.ContainsAny(got, " ()") {
		t.Errorf("Version = %q, want a version or dev", got)
	}
}

func TestUserAgent(t *testing.T) {
	version = "v9.8.7"
	t.Cleanup(func() { version = "" })
	if got := UserAgent(); got != "swh-probe/v9.8.7" {
		t.Errorf("UserAgent = %q, want swh-probe/v9.8.7", got)
	}
}
