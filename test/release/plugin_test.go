package release_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// krewPlugin is what TestPluginRelease reads of a krew plugin manifest.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Homepage         string `json:"homepage"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Bin    string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// TestPluginRelease builds the plugin's release archive for this machine's
// platform twice (hack/plugin-release.sh, what `make plugin-release` runs
// for every platform): the two are the same bytes, the krew manifest names
// the archive with its sha256, and the binary in it runs.
func TestPluginRelease(t *testing.T) {
	platform := "linux/" + runtime.GOARCH
	var sums [2]string
	var manifest []byte
	var archive string
	for i := range sums {
		out := t.TempDir()
		cmd := exec.Command(filepath.Join(root, "hack", "plugin-release.sh"), out)
		cmd.Env = append(os.Environ(), "PLATFORMS="+platform, "VERSION=v0.9.8")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hack/plugin-release.sh: %v\n%s", err, b)
		}
		archive = filepath.Join(out, "kubectl-swh_v0.9.8_linux_"+runtime.GOARCH+".tar.gz")
		data, err := os.ReadFile(archive)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		sums[i] = hex.EncodeToString(sum[:])
		if manifest, err = os.ReadFile(filepath.Join(out, "kubectl-swh.krew.yaml")); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			checkArchive(t, data)
		}
	}
	if sums[0] != sums[1] {
		t.Errorf("two builds of the archive differ: %s and %s", sums[0], sums[1])
	}

	var p krewPlugin
	if err := yaml.UnmarshalStrict(manifest, &p); err != nil {
		t.Fatalf("the krew manifest: %v\n%s", err, manifest)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "swh" ||
		p.Spec.Version != "v0.9.8" || p.Spec.ShortDescription == "" || p.Spec.Description == "" || p.Spec.Homepage == "" || len(p.Spec.Platforms) != 1 {
		t.Fatalf("krew manifest %+v", p)
	}
	pl := p.Spec.Platforms[0]
	if pl.SHA256 != sums[0] || pl.Bin != "kubectl-swh" || pl.Selector.MatchLabels["os"] != "linux" || pl.Selector.MatchLabels["arch"] != runtime.GOARCH ||
		!strings.HasSuffix(pl.URI, "/kubectl-swh_v0.9.8_linux_"+runtime.GOARCH+".tar.gz") || !strings.HasPrefix(pl.URI, "https://") {
		t.Errorf("krew platform %+v, want the archive's URL, sha256 %s and bin kubectl-swh", pl, sums[0])
	}
}

// checkArchive extracts the archive, checks it holds the binary and the
// LICENSE at its root, and runs the binary.
func checkArchive(t *testing.T, data []byte) {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	names := map[string]bool{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = true
		wantMode := map[string]int64{"kubectl-swh": 0o755, "LICENSE": 0o644}[h.Name]
		if h.Uid != 0 || h.Gid != 0 || h.ModTime.Unix() != 0 || h.Mode&0o777 != wantMode {
			t.Errorf("%s: owner %d:%d, time %v, mode %o; want 0:0, the epoch and %o (reproducible)", h.Name, h.Uid, h.Gid, h.ModTime, h.Mode&0o777, wantMode)
		}
		f, err := os.OpenFile(filepath.Join(dir, filepath.Base(h.Name)), os.O_CREATE|os.O_WRONLY, os.FileMode(h.Mode))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
	}
	if len(names) != 2 || !names["kubectl-swh"] || !names["LICENSE"] {
		t.Fatalf("archive holds %v, want kubectl-swh and LICENSE", names)
	}
	for _, args := range [][]string{{"--version"}, {"--help"}} {
		out, err := exec.Command(filepath.Join(dir, "kubectl-swh"), args...).CombinedOutput()
		if err != nil {
			t.Errorf("kubectl-swh %v: %v\n%s", args, err, out)
		}
		if args[0] == "--version" && !strings.Contains(string(out), "v0.9.8") {
			t.Errorf("kubectl-swh --version printed %q, want v0.9.8", out)
		}
	}
}
