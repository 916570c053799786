package harness_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/swh-dev/swh/test/harness"
)

// TestProcessFigures reads this process's own CPU time and memory: the
// CPU time grows with work done, the peak is at least the current size,
// and a field or process that does not exist is an error, not a zero.
func TestProcessFigures(t *testing.T) {
	pid := os.Getpid()
	before, err := harness.ProcessCPU(pid, false)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(100 * time.Millisecond); time.Now().Before(deadline); {
		// Spin: the CPU time must count it.
	}
	after, err := harness.ProcessCPU(pid, true)
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 0.05 {
		t.Errorf("CPU time %.2f s then %.2f s after spinning 100 ms", before, after)
	}
	kib, err := harness.ProcessMemoryKiB(pid, "VmRSS", "VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	if kib[0] <= 0 || kib[1] < kib[0] {
		t.Errorf("VmRSS %d KiB, VmHWM %d KiB: want a peak at least the current size", kib[0], kib[1])
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"missing field", func() error { _, err := harness.ProcessMemoryKiB(pid, "VmNope"); return err }()},
		{"no such process CPU", func() error { _, err := harness.ProcessCPU(-1, false); return err }()},
		{"no such process memory", func() error { _, err := harness.ProcessMemoryKiB(-1, "VmRSS"); return err }()},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if load := harness.LoadAverage(); len(strings.Fields(load)) != 3 {
		t.Errorf("LoadAverage() = %q, want three figures", load)
	}
}
