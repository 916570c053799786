package probes

import (
	"runtime/debug"
	"testing"
)

// TestVersionIn: the User-Agent names a release only when the binary was
// built from one.
func TestVersionIn(t *testing.T) {
	dep := func(version string, replace *debug.Module) *debug.Module {
		return &debug.Module{Path: modulePath, Version: version, Replace: replace}
	}
	for _, tc := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"a release", debug.BuildInfo{Deps: []*debug.Module{dep("v0.1.0", nil)}}, "v0.1.0"},
		{"a directory replace (a work tree)", debug.BuildInfo{Deps: []*debug.Module{dep("v0.1.0", &debug.Module{Path: "../probes"})}}, "dev"},
		{"a replace by another version", debug.BuildInfo{Deps: []*debug.Module{dep("v0.1.0", &debug.Module{Path: modulePath, Version: "v0.1.1"})}}, "v0.1.1"},
		{"the main module, from a work tree", debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}}, "dev"},
		{"not a dependency", debug.BuildInfo{Main: debug.Module{Path: "example.com/x", Version: "v1.0.0"}}, "dev"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionIn(&tc.info); got != tc.want {
				t.Errorf("version %q, want %q", got, tc.want)
			}
		})
	}
}
