package deploy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swh-dev/swh/test/harness"
)

// TestDockerfileHasLocalModules fails when a binary's module replaces a
// sibling module (../x) that the Dockerfile does not copy into the build or
// that .dockerignore keeps out of the build context: its image would not
// build. (No Docker engine runs here; make verify builds the same static
// binaries through hack/build-release.sh.)
func TestDockerfileHasLocalModules(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(path string) string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	dockerfile, ignore := read("Dockerfile"), read(".dockerignore")
	for _, component := range []string{"controller", "agent"} {
		for _, line := range strings.Split(read(filepath.Join(component, "go.mod")), "\n") {
			_, target, ok := strings.Cut(line, "=> ../")
			if !ok {
				continue
			}
			dir := strings.TrimSpace(target)
			if !strings.Contains(dockerfile, "COPY "+dir+"/go.mod "+dir+"/go.sum "+dir+"/") ||
				!strings.Contains(dockerfile, "COPY "+dir+"/ "+dir+"/") {
				t.Errorf("%s/go.mod uses ../%s, which the Dockerfile does not copy", component, dir)
			}
			if !strings.Contains(ignore, "!"+dir+"/\n") {
				t.Errorf("%s/go.mod uses ../%s, which .dockerignore keeps out of the build context", component, dir)
			}
		}
	}
}
