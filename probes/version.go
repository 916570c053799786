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
	return versionIn(info)
}

// versionIn reads this module's version from a binary's build info.
func versionIn(info *debug.BuildInfo) string {
	version := ""
	if info.Main.Path == modulePath {
		version = info.Main.Version
	}
	for _, dep := range info.Deps {
		if dep.Path == modulePath {
			version = dep.Version
			switch {
			case dep.Replace != nil && dep.Replace.Version == "":
				// A directory replace (a work tree): the required
				// version names a release this code may not be.
				version = ""
			case dep.Replace != nil:
				version = dep.Replace.Version
			}
		}
	}
	if version == "" || version == "(devel)" {
		return "dev"
	}
	return version
}
