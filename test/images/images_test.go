package images_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/swh-dev/swh/test/harness"
	"github.com/swh-dev/swh/test/images"
)

// TestImages builds every image twice into two folders (as make images
// does), then checks that both builds are identical and what each image
// holds, runs the workload and pause binaries taken out of their images,
// and imports the tarballs into a private containerd when one is installed.
func TestImages(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// One revision and date for both builds, even if a commit lands between.
	opts := images.Options{Root: root}
	if opts.Epoch, err = images.SourceDate(ctx, root); err != nil {
		t.Fatal(err)
	}
	head, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	opts.Revision = strings.TrimSpace(string(head))

	var builds [2][]images.Result
	for i := range builds {
		o := opts
		o.Out = t.TempDir()
		start := time.Now()
		if builds[i], err = images.Build(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Logf("build %d took %s", i+1, time.Since(start).Round(100*time.Millisecond))
	}
	first := builds[0]
	for _, r := range first {
		t.Logf("%s %s %.1f MB", r.Ref, r.Digest, float64(r.Size)/1e6)
	}

	t.Run("reproducible", func(t *testing.T) {
		if len(builds[0]) != len(builds[1]) {
			t.Fatalf("the builds made %d and %d images", len(builds[0]), len(builds[1]))
		}
		for i, a := range builds[0] {
			b := builds[1][i]
			if a.Ref != b.Ref || a.Digest != b.Digest {
				t.Errorf("image %s: %s %s, then %s %s", a.Name, a.Ref, a.Digest, b.Ref, b.Digest)
			}
			if sa, sb := fileSum(t, a.File), fileSum(t, b.File); sa != sb {
				t.Errorf("%s: the tarballs differ (%x, %x)", a.Name, sa, sb)
			}
		}
	})

	version, err := images.AppVersion(root)
	if err != nil {
		t.Fatal(err)
	}
	release := t.TempDir()
	wantNames := []string{"swh-controller", "swh-agent", "swh-workload", "pause"}
	if len(first) != len(wantNames) {
		t.Fatalf("built %d images, want %v", len(first), wantNames)
	}
	for i, r := range first {
		t.Run(r.Name, func(t *testing.T) {
			if r.Name != wantNames[i] {
				t.Fatalf("image %d is %s, want %s", i, r.Name, wantNames[i])
			}
			img, ref := read(t, r)
			want := imageWant{ref: images.DefaultRepo + "/" + r.Name + ":" + version, version: version,
				user: "65532:65532", entrypoint: "/swh", binary: "swh", workdir: "/home/nonroot"}
			switch r.Name {
			case "swh-controller", "swh-agent":
				want.pkg = "github.com/swh-dev/swh/" + strings.TrimPrefix(r.Name, "swh-") + "/cmd/" + r.Name
			case "swh-workload":
				want.pkg = "github.com/swh-dev/swh/test/cmd/swh-workload"
			case "pause":
				want = imageWant{ref: images.PauseRef, version: "3.10", user: "65535:65535",
					entrypoint: "/pause", binary: "pause", pkg: "github.com/swh-dev/swh/test/cmd/swh-pause"}
			}
			if ref != want.ref || r.Ref != want.ref {
				t.Errorf("reference %q (result %q), want %q", ref, r.Ref, want.ref)
			}
			checkConfig(t, img, r, want, opts)
			files := layerFiles(t, img, opts.Epoch)
			bin := checkBinary(t, files, want)
			if r.Name == "pause" {
				if len(files) != 1 {
					t.Errorf("the pause image holds %d entries, want only the binary", len(files))
				}
			} else {
				checkNonroot(t, files)
			}
			if strings.HasPrefix(want.pkg, "github.com/swh-dev/swh/test/") {
				return
			}
			// The very binary hack/build-release.sh makes (the Dockerfile's),
			// with its VCS stamp off as in the Dockerfile.
			component := strings.TrimPrefix(r.Name, "swh-")
			cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "build-release.sh"), release, component)
			cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -buildvcs=false"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("hack/build-release.sh %s: %v\n%s", component, err, out)
			}
			if want, err := os.ReadFile(filepath.Join(release, r.Name)); err != nil {
				t.Fatal(err)
			} else if !bytes.Equal(bin, want) {
				t.Errorf("/swh (%d bytes) is not the release binary of hack/build-release.sh (%d bytes)", len(bin), len(want))
			}
		})
	}

	t.Run("run-workload", func(t *testing.T) { testWorkload(t, first[2]) })
	t.Run("run-pause", func(t *testing.T) { testPause(t, first[3]) })
	t.Run("containerd-import", func(t *testing.T) { testContainerdImport(t, first) })
}

type imageWant struct {
	ref, version, user, entrypoint, binary, workdir, pkg string
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data)
}

// read opens an image tarball with go-containerregistry.
func read(t *testing.T, r images.Result) (v1.Image, string) {
	t.Helper()
	img, ref, err := images.Read(r.File, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if digest != r.Digest {
		t.Errorf("the tarball's manifest is %s, Build printed %s", digest, r.Digest)
	}
	return img, ref
}

func checkConfig(t *testing.T, img v1.Image, r images.Result, want imageWant, opts images.Options) {
	t.Helper()
	if mt, err := img.MediaType(); err != nil || mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %q (%v), want %q", mt, err, types.OCIManifestSchema1)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != want.user {
		t.Errorf("user %q, want %q", c.User, want.user)
	}
	if !slices.Equal(c.Entrypoint, []string{want.entrypoint}) || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [%q] and no cmd", c.Entrypoint, c.Cmd, want.entrypoint)
	}
	if c.WorkingDir != want.workdir {
		t.Errorf("working directory %q, want %q", c.WorkingDir, want.workdir)
	}
	labels := map[string]string{
		"org.opencontainers.image.source":   "https://github.com/swh-dev/swh",
		"org.opencontainers.image.title":    r.Name,
		"org.opencontainers.image.version":  want.version,
		"org.opencontainers.image.revision": opts.Revision,
	}
	for k, v := range labels {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if !cf.Created.Time.Equal(opts.Epoch) {
		t.Errorf("created %s, want the source date %s", cf.Created.Time, opts.Epoch)
	}
}

// entry is one file of the layer.
type entry struct {
	h    *tar.Header
	data []byte
}

// layerFiles reads the image's only layer; every entry must carry the
// source date and come in sorted order.
func layerFiles(t *testing.T, img v1.Image, epoch time.Time) map[string]entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	if mt, err := layers[0].MediaType(); err != nil || mt != types.OCILayer {
		t.Errorf("layer media type %q (%v), want %q", mt, err, types.OCILayer)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]entry{}
	tr := tar.NewReader(rc)
	prev := ""
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name <= prev {
			t.Errorf("entry %q comes after %q: not sorted", h.Name, prev)
		}
		prev = h.Name
		if !h.ModTime.Equal(epoch) {
			t.Errorf("%s: mtime %s, want the source date %s", h.Name, h.ModTime, epoch)
		}
		files[h.Name] = entry{h: h, data: data}
	}
	return files
}

// checkBinary checks the entrypoint's file: executable, owned by root,
// static (no PT_INTERP), built without cgo and with -trimpath from the
// expected package. It returns the binary.
func checkBinary(t *testing.T, files map[string]entry, want imageWant) []byte {
	t.Helper()
	e, ok := files[want.binary]
	if !ok {
		t.Fatalf("no /%s in the layer", want.binary)
	}
	if e.h.Typeflag != tar.TypeReg || e.h.Mode != 0o755 || e.h.Uid != 0 || e.h.Gid != 0 {
		t.Errorf("/%s: type %c mode %o owner %d:%d, want a regular file 755 owned by 0:0", want.binary, e.h.Typeflag, e.h.Mode, e.h.Uid, e.h.Gid)
	}
	f, err := elf.NewFile(bytes.NewReader(e.data))
	if err != nil {
		t.Fatalf("/%s is not an ELF binary: %v", want.binary, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("/%s is dynamically linked (PT_INTERP)", want.binary)
		}
	}
	info, err := buildinfo.Read(bytes.NewReader(e.data))
	if err != nil {
		t.Fatalf("/%s: no Go build information: %v", want.binary, err)
	}
	if info.Path != want.pkg {
		t.Errorf("/%s was built from %s, want %s", want.binary, info.Path, want.pkg)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("/%s: CGO_ENABLED=%q -trimpath=%q, want 0 and true", want.binary, settings["CGO_ENABLED"], settings["-trimpath"])
	}
	return e.data
}

// checkNonroot checks what the distroless nonroot base would give.
func checkNonroot(t *testing.T, files map[string]entry) {
	t.Helper()
	text := func(name string) string {
		e, ok := files[name]
		if !ok {
			t.Errorf("no /%s in the layer", name)
			return ""
		}
		return string(e.data)
	}
	passwd := text("etc/passwd")
	for _, line := range []string{"root:x:0:0:", "nobody:x:65534:65534:", "nonroot:x:65532:65532:nonroot:/home/nonroot:"} {
		if !strings.Contains(passwd, "\n"+line) && !strings.HasPrefix(passwd, line) {
			t.Errorf("/etc/passwd has no line starting %q:\n%s", line, passwd)
		}
	}
	group := text("etc/group")
	for _, line := range []string{"root:x:0:", "nobody:x:65534:", "nonroot:x:65532:"} {
		if !strings.Contains(group, "\n"+line) && !strings.HasPrefix(group, line) {
			t.Errorf("/etc/group has no line starting %q:\n%s", line, group)
		}
	}
	bundle := text("etc/ssl/certs/ca-certificates.crt")
	if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM([]byte(bundle)) {
		t.Errorf("/etc/ssl/certs/ca-certificates.crt holds no certificate (%d bytes)", len(bundle))
	}
	if host, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil && string(host) != bundle {
		t.Errorf("/etc/ssl/certs/ca-certificates.crt differs from the build machine's bundle")
	}
	dirs := []struct {
		name     string
		mode     int64
		uid, gid int
	}{
		{"tmp/", 0o1777, 0, 0},
		{"home/nonroot/", 0o700, 65532, 65532},
		{"root/", 0o700, 0, 0},
		{"etc/ssl/certs/", 0o755, 0, 0},
	}
	for _, d := range dirs {
		e, ok := files[d.name]
		if !ok {
			t.Errorf("no /%s in the layer", d.name)
			continue
		}
		if e.h.Typeflag != tar.TypeDir || e.h.Mode != d.mode || e.h.Uid != d.uid || e.h.Gid != d.gid {
			t.Errorf("/%s: type %c mode %o owner %d:%d, want a directory %o owned by %d:%d",
				d.name, e.h.Typeflag, e.h.Mode, e.h.Uid, e.h.Gid, d.mode, d.uid, d.gid)
		}
	}
	for name, e := range files {
		// Every parent is an entry of its own, so the runtime never invents one.
		if parent := filepath.Dir(strings.TrimSuffix(name, "/")); parent != "." {
			if _, ok := files[parent+"/"]; !ok {
				t.Errorf("/%s has no entry for its folder /%s", name, parent)
			}
		}
		if e.h.Typeflag == tar.TypeReg && e.h.Mode != 0o644 && e.h.Mode != 0o755 {
			t.Errorf("/%s: mode %o", name, e.h.Mode)
		}
	}
}
