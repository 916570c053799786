package probes

import "runtime/debug"

const modulePath = "github.com/swh-dev/swh/probes"

// defaultUserAgent returns "swh-probe/<version>", the version being this
// module's as recorded in the binary ("dev" when built from a work tree);
// HTTPConfig.UserAgent replaces it.
func defaultUserAgent() string {
	return "swh-probe/" + moduleVersion()
}

func moduleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	version := ""
	if info.Main.Path == modulePath {
		version = info.Main.Version
	}
	for _, dep := range info.Deps {
		if dep.Path == modulePath {
			version = dep.Version
			if dep.Replace != nil && dep.Replace.Version != "" {
				version = dep.Replace.Version
			}
		}
	}
	if version == "" || version == "(devel)" {
		return "dev"
	}
	return version
}
