package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGroup: programs started in the world log to their file, stop on
// SIGTERM or are killed after the timeout, in reverse order, and Left says
// whether any is still there. No namespace: this runs without root.
func TestGroup(t *testing.T) {
	dir := t.TempDir()
	g := NewGroup(dir, 500*time.Millisecond)
	polite, err := g.Start(nil, "polite", []string{"WORD=hello"}, "sh", "-c", `echo "$WORD"; exec sleep 30`)
	if err != nil {
		t.Fatal(err)
	}
	// Ignores SIGTERM: killed after the group's timeout.
	stubborn, err := g.Start(nil, "stubborn", nil, "sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.1; done`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Start(nil, "missing", nil, filepath.Join(dir, "no-such-program")); err == nil {
		t.Error("a program that does not exist started")
	}
	if got := g.Procs(); len(got) != 2 || got[0] != polite || got[1] != stubborn {
		t.Fatalf("Procs() = %v, want polite and stubborn", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for polite.LogTail(1) != "hello" || stubborn.LogTail(1) != "ready" {
		if time.Now().After(deadline) {
			t.Fatalf("logs %q and %q, want hello and ready", polite.LogTail(1), stubborn.LogTail(1))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !polite.Running() || !stubborn.Running() {
		t.Fatal("a process exited early")
	}
	if err := g.Left(); err == nil || !strings.Contains(err.Error(), "polite") || !strings.Contains(err.Error(), "stubborn") {
		t.Errorf("Left() = %v while both run", err)
	}

	start := time.Now()
	g.StopAll()
	took := time.Since(start)
	if polite.Running() || stubborn.Running() {
		t.Fatal("still running after StopAll")
	}
	if took < 400*time.Millisecond || took > 10*time.Second {
		t.Errorf("StopAll took %s: the stubborn one gets the 500 ms timeout, then SIGKILL", took)
	}
	if err := g.Left(); err != nil {
		t.Errorf("Left() = %v after StopAll", err)
	}
	if err := syscall.Kill(stubborn.PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the stubborn process's PID: %v, want no such process", err)
	}
	polite.Kill() // a stopped process: nothing to do, no hang
	if err := g.CloseNamespaces(true); err != nil {
		t.Errorf("CloseNamespaces with none: %v", err)
	}
}

func TestTail(t *testing.T) {
	file := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(file, []byte("one\ntwo\nthree\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		lines int
		want  string
	}{{1, "three"}, {2, "two\nthree"}, {5, "one\ntwo\nthree"}}
	for _, tt := range tests {
		if got := Tail(file, tt.lines); got != tt.want {
			t.Errorf("Tail(%d) = %q, want %q", tt.lines, got, tt.want)
		}
	}
	if got := Tail(file+"-missing", 1); !strings.Contains(got, "no such file") {
		t.Errorf("Tail of a missing file = %q, want why", got)
	}
}

// TestWaitLinksGone: no link of the world holds a name nobody uses.
func TestWaitLinksGone(t *testing.T) {
	if err := WaitLinksGone(context.Background(), "swh-no-such-link-"); err != nil {
		t.Fatal(err)
	}
}
