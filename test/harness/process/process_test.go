package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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

// TestStartSpec: a program gets exactly the environment and folder it is
// given, its stop signal, and with OwnGroup nothing it forked outlives
// Stop, even what ignores the signal.
func TestStartSpec(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	childPID := filepath.Join(dir, "child")
	p, err := Start(Spec{
		Name: "leader", Path: "/bin/sh", Dir: dir, Log: log, OwnGroup: true, DiesWithSuite: true,
		Env: []string{"WORD=hello", "PATH=/usr/bin:/bin"}, CleanEnv: true,
		StopSignal: syscall.SIGINT, StopTimeout: 5 * time.Second,
		Args: []string{"-c", `echo "$WORD $(pwd) ${HOME:-no-home}"; (trap "" INT TERM; exec sleep 30) & echo $! > child; trap "echo got-int; exit 3" INT; while :; do sleep 0.1; done`},
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var child int
	for {
		data, _ := os.ReadFile(childPID)
		if _, err := fmt.Sscan(string(data), &child); err == nil && child > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no child started; log: %s", p.LogTail(5))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got, want := p.LogTail(1), "hello "+dir+" no-home"; got != want {
		t.Errorf("first line %q, want %q (only the environment given, in its folder)", got, want)
	}
	p.Stop()
	if p.Running() || !strings.Contains(p.LogTail(1), "got-int") {
		t.Errorf("running %t, last line %q: want stopped by SIGINT", p.Running(), p.LogTail(1))
	}
	var exit *exec.ExitError
	if err := p.Err(); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Errorf("Err() = %v, want exit status 3", err)
	}
	waitGone(t, child)
}

// waitGone waits until pid is gone (or a zombie nobody reaps yet).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(stat[strings.LastIndexByte(string(stat), ')')+1:]), " Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d, forked by the stopped one, still runs: %s", pid, stat)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCleanEnvIsEmpty: CleanEnv with no Env gives the program no
// environment at all, not the suite's.
func TestCleanEnvIsEmpty(t *testing.T) {
	t.Setenv("SWH_PROCESS_TEST", "leaked")
	log := filepath.Join(t.TempDir(), "log")
	p, err := Start(Spec{Name: "env", Path: "/usr/bin/env", CleanEnv: true, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(log); err != nil || len(data) != 0 {
		t.Errorf("environment %q (%v), want none", data, err)
	}
}
