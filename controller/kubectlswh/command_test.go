package kubectlswh

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// TestCommandConventions: the plugin's flags and arguments behave as
// kubectl's do, and what needs no cluster is decided before reading one
// (the kubeconfig here does not exist, so any read would fail with its
// own error).
func TestCommandConventions(t *testing.T) {
	const noCluster = "--kubeconfig=/nonexistent/kubeconfig"
	for _, tc := range []struct {
		name string
		args []string
		// wantErr is a substring of the error; "" wants none.
		wantErr string
		// wantOut are substrings of stdout.
		wantOut []string
	}{
		{name: "--help exits 0 with the usage", args: []string{"--help"}, wantOut: []string{"Usage:", "kubectl swh [command]", "status", "why"}},
		{name: "-h too", args: []string{"-h"}, wantOut: []string{"Usage:"}},
		{name: "help of a command", args: []string{"status", "--help"}, wantOut: []string{"kubectl swh status [NAME]", "--all-namespaces", "--no-headers", "--output"}},
		{name: "--version", args: []string{"--version"}, wantOut: []string{"kubectl-swh"}},
		{name: "version", args: []string{"version"}, wantOut: []string{"kubectl-swh"}},
		{name: "an unknown command", args: []string{"statsu", "db"}, wantErr: `unknown command "statsu"`},
		{name: "an unknown flag", args: []string{"status", "db", "--bogus"}, wantErr: "unknown flag: --bogus"},
		{name: "why needs a pod", args: []string{"why", "db", noCluster}, wantErr: "accepts 2 arg(s), received 1"},
		{name: "status takes one name", args: []string{"status", "a", "b", noCluster}, wantErr: "accepts at most 1 arg(s), received 2"},
		{name: "a wrong -o fails before any read", args: []string{"status", "db", "-o", "xml", noCluster}, wantErr: "-o xml"},
		{name: "-o wide is not a why format", args: []string{"why", "db", "db-0", "-o", "wide", noCluster}, wantErr: "-o wide: why prints sentences"},
		{name: "a name with -A", args: []string{"status", "db", "-A", noCluster}, wantErr: "a resource name and --all-namespaces"},
		{name: "a bad agent selector", args: []string{"status", "db", "--agent-selector", "a in (", noCluster}, wantErr: "--agent-selector"},
		{name: "flags before the arguments", args: []string{"-n", "shop", "status", "db", "-o", "xml", noCluster}, wantErr: "-o xml"},
		{name: "bash completion", args: []string{"completion", "bash"}, wantOut: []string{"bash completion"}},
		{name: "the cluster is read last", args: []string{"status", "db", noCluster}, wantErr: "nonexistent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := Run(context.Background(), tc.args, &out, &errOut)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v (stderr %q)", err, errOut.String())
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one with %q", err, tc.wantErr)
			}
			for _, want := range tc.wantOut {
				if !strings.Contains(out.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

// TestKubectlFlags: kubectl's cluster flags are there, double-dashed,
// with kubectl's shorthands.
func TestKubectlFlags(t *testing.T) {
	cmd := NewCommand(testStreams())
	status, _, err := cmd.Find([]string{"status"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ name, shorthand string }{
		{"kubeconfig", ""}, {"context", ""}, {"namespace", "n"}, {"as", ""}, {"as-group", ""},
		{"request-timeout", ""}, {"server", "s"}, {"token", ""}, {"output", "o"}, {"all-namespaces", "A"},
		{"no-headers", ""}, {"template", ""}, {"agent-namespace", ""}, {"agent-selector", ""},
	} {
		flag := status.Flags().Lookup(f.name)
		if flag == nil {
			flag = status.InheritedFlags().Lookup(f.name)
		}
		if flag == nil {
			t.Errorf("no --%s", f.name)
			continue
		}
		if flag.Shorthand != f.shorthand {
			t.Errorf("--%s has shorthand %q, want %q", f.name, flag.Shorthand, f.shorthand)
		}
	}
}

func testStreams() genericiooptions.IOStreams {
	return genericiooptions.IOStreams{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}
}
