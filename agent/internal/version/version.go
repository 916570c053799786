// Package version is the version the binaries of this module report: by
// --version and in the probes' User-Agent (UserAgent). The release
// build (hack/build-release.sh, make build) stamps it at link time. The
// controller module has the same package: modules do not share internals.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Stamped is the linker flag that sets the version, for build scripts and tests:
//
//	go build -ldflags "-X $(Stamped)=v0.1.0" ./cmd/...
const Stamped = "github.com/swh-dev/swh/agent/internal/version.version"

// version is written by the linker (-ldflags -X, see Stamped), the Go
// idiom for a build-time value; it is this package's only variable and
// nothing assigns it at run time. Empty when the build did not stamp it.
var version string

// Version returns the binary's version: the one stamped at link time, else
// the main module's version the go command recorded (v0.1.0 for `go install
// …@v0.1.0`, a pseudo-version for a build in a clone), else "dev".
func Version() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}

// String is what --version prints: "NAME VERSION (revision REV, GOVERSION)".
// The revision comes from the go command's VCS stamp; "unknown" when the
// build had none (-buildvcs=false, as the images' reproducible builds).
func String(name string) string {
	revision, modified, goVersion := "unknown", false, runtime.Version()
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value[:min(len(s.Value), 7)]
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if modified {
		revision += "-dirty"
	}
	return fmt.Sprintf("%s %s (revision %s, %s)", name, Version(), revision, goVersion)
}

// UserAgent is the User-Agent of the agent's HTTP probes:
// "swh-probe/VERSION", the agent's version rather than the probes
// module's, which a build from a clone does not know.
func UserAgent() string {
	return "swh-probe/" + Version()
}
