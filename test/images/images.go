// Package images builds the container images of swh and of the real-node
// tests without a Docker engine or a registry (make images): the controller
// and agent from their static release binaries (hack/build-release.sh), the
// test workload, and a pod sandbox ("pause") image. Each image is one layer
// FROM scratch holding what the distroless nonroot base of the Dockerfile
// would give (passwd and group with nonroot 65532, CA certificates, /tmp,
// /home/nonroot) plus the binary at /swh, assembled with go-containerregistry
// and written as an OCI image tarball that `ctr -n k8s.io images import`
// takes (index annotation io.containerd.image.name = the reference).
//
// The images are reproducible: every file has a fixed owner, mode and mtime
// (the source date), the entries are sorted and the config's created time is
// the source date, so the same sources give the same digests.
//
// It lives in the test module because the real-node harness imports it;
// go-containerregistry shares no dependency version with the product
// modules that it would move (make verify's modcheck).
package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// DefaultRepo is the chart's image repository prefix.
	DefaultRepo = "ghcr.io/swh-dev"
	// PauseRef is the sandbox image the real-node cluster's containerd must
	// be configured with (sandbox_image): the version kubelet 1.37's
	// kubeadm expects; the real one cannot be pulled here.
	PauseRef = "registry.k8s.io/pause:3.10"
	// Source is the org.opencontainers.image.source label.
	Source = "https://github.com/swh-dev/swh"

	// NonRoot is the distroless nonroot user and group the images run as.
	NonRoot = 65532
	// pauseUser is the user of the upstream pause image.
	pauseUser = 65535
	// BinaryPath is where the binary lives in the swh and workload images.
	BinaryPath = "/swh"

	// containerdNameAnnotation names the image when ctr imports the tarball.
	containerdNameAnnotation = "io.containerd.image.name"
	// refNameAnnotation is the OCI layout's own name (the tag) of an image.
	refNameAnnotation = "org.opencontainers.image.ref.name"
)

// Options say what to build and from where; zero fields take defaults.
type Options struct {
	// Root is the repository's top directory (required).
	Root string
	// Out receives NAME.tar for every image and digests.txt (required).
	Out string
	// Repo prefixes the swh and workload images (DefaultRepo).
	Repo string
	// Version is their tag and version label: the chart's appVersion.
	Version string
	// Revision is the revision label: git rev-parse HEAD.
	Revision string
	// Epoch is every file's mtime and the config's created time:
	// $SOURCE_DATE_EPOCH, else the last commit's time.
	Epoch time.Time
	// CACerts is the bundle copied to /etc/ssl/certs/ca-certificates.crt:
	// Debian's ca-certificates (/etc/ssl/certs/ca-certificates.crt).
	CACerts string
	// Log receives the build's progress (nil: none).
	Log io.Writer
}

// Result is one image written.
type Result struct {
	// Name is the image's short name (swh-controller, swh-agent,
	// swh-workload, pause); the tarball is Out/Name.tar.
	Name string
	// Ref is the image reference its tarball carries.
	Ref string
	// Digest is the manifest's digest, as containerd will show it.
	Digest v1.Hash
	// File is the OCI image tarball; Size its size in bytes.
	File string
	Size int64
}

// spec is one image to build.
type spec struct {
	name, ref, binary string
	// arch is the image's architecture: the machine's when empty.
	arch string
	// pause images hold only the binary and run as pauseUser.
	pause bool
}

// Build compiles the binaries and writes every image; it returns them in a
// fixed order: swh-controller, swh-agent, swh-workload, pause.
func Build(ctx context.Context, o Options) ([]Result, error) {
	if err := o.complete(ctx); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	bin, err := os.MkdirTemp(o.Out, ".bin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(bin)
	if err := buildBinaries(ctx, o, bin); err != nil {
		return nil, err
	}
	specs := []spec{
		{name: "swh-controller", binary: "swh-controller"},
		{name: "swh-agent", binary: "swh-agent"},
		{name: "swh-workload", binary: "swh-workload"},
		{name: "pause", ref: PauseRef, binary: "swh-pause", pause: true},
	}
	ca, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("reading the CA bundle (Debian's ca-certificates package): %w", err)
	}
	var results []Result
	var list bytes.Buffer
	for _, s := range specs {
		if s.ref == "" {
			s.ref = o.Repo + "/" + s.name + ":" + o.Version
		}
		binary, err := os.ReadFile(filepath.Join(bin, s.binary))
		if err != nil {
			return nil, err
		}
		img, err := o.image(s, binary, ca)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.name, err)
		}
		file := filepath.Join(o.Out, s.name+".tar")
		if err := writeArchive(img, s.ref, file, o.Epoch); err != nil {
			return nil, fmt.Errorf("writing %s: %w", file, err)
		}
		r := Result{Name: s.name, Ref: s.ref, File: file}
		if r.Digest, err = img.Digest(); err != nil {
			return nil, err
		}
		st, err := os.Stat(file)
		if err != nil {
			return nil, err
		}
		r.Size = st.Size()
		results = append(results, r)
		fmt.Fprintf(&list, "%s %s %s\n", r.Ref, r.Digest, filepath.Base(file))
	}
	// digests.txt: one "REF DIGEST FILE" line per image, for scripts.
	if err := os.WriteFile(filepath.Join(o.Out, "digests.txt"), list.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return results, nil
}

// complete fills the defaults.
func (o *Options) complete(ctx context.Context) error {
	if o.Root == "" || o.Out == "" {
		return errors.New("images: Root and Out are required")
	}
	if o.Repo == "" {
		o.Repo = DefaultRepo
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.CACerts == "" {
		o.CACerts = "/etc/ssl/certs/ca-certificates.crt"
	}
	var err error
	if o.Version == "" {
		if o.Version, err = AppVersion(o.Root); err != nil {
			return err
		}
	}
	if o.Revision == "" {
		if o.Revision, err = git(ctx, o.Root, "rev-parse", "HEAD"); err != nil {
			return fmt.Errorf("the revision label (set Options.Revision outside a git checkout): %w", err)
		}
	}
	if o.Epoch.IsZero() {
		if o.Epoch, err = SourceDate(ctx, o.Root); err != nil {
			return err
		}
	}
	o.Epoch = o.Epoch.UTC().Truncate(time.Second)
	return nil
}

// AppVersion reads appVersion from the chart's Chart.yaml.
func AppVersion(root string) (string, error) {
	path := filepath.Join(root, "deploy", "charts", "swh", "Chart.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "appVersion:"); ok {
			if v = strings.Trim(strings.TrimSpace(v), `"'`); v != "" {
				return v, nil
			}
		}
	}
	return "", fmt.Errorf("no appVersion in %s", path)
}

// SourceDate is $SOURCE_DATE_EPOCH (reproducible-builds.org), else the time
// of the last commit.
func SourceDate(ctx context.Context, root string) (time.Time, error) {
	value, from := os.Getenv("SOURCE_DATE_EPOCH"), "SOURCE_DATE_EPOCH"
	if value == "" {
		var err error
		if value, err = git(ctx, root, "log", "-1", "--format=%ct"); err != nil {
			return time.Time{}, fmt.Errorf("the source date (set SOURCE_DATE_EPOCH outside a git checkout): %w", err)
		}
		from = "the last commit's time"
	}
	secs, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q: %w", from, value, err)
	}
	return time.Unix(secs, 0).UTC(), nil
}

func git(ctx context.Context, root string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// buildBinaries compiles the release binaries with hack/build-release.sh
// and the workload and pause programs with the same flags, all static. The
// VCS stamp is off, as in the Dockerfile, so an unrelated edit or commit
// does not change a binary; Go's build cache makes a rebuild cheap.
func buildBinaries(ctx context.Context, o Options, bin string) error {
	// VERSION: the binaries report the version the images are tagged with.
	env := append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "VERSION="+o.Version,
		"GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -buildvcs=false"))
	run := func(dir string, name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = dir, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
		}
		return nil
	}
	fmt.Fprintln(o.Log, ">> release binaries: hack/build-release.sh controller agent")
	if err := run(o.Root, filepath.Join(o.Root, "hack", "build-release.sh"), bin, "controller", "agent"); err != nil {
		return err
	}
	fmt.Fprintln(o.Log, ">> test binaries: swh-workload, swh-pause")
	return run(filepath.Join(o.Root, "test"), "go", "build", "-trimpath", "-ldflags=-s -w -buildid=",
		"-o", bin+string(filepath.Separator), "./cmd/swh-workload", "./cmd/swh-pause")
}

// image assembles one image: a single layer and its config.
func (o Options) image(s spec, binary, ca []byte) (v1.Image, error) {
	var files []file
	cfg := v1.Config{
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		},
		Labels: map[string]string{
			"org.opencontainers.image.source":   Source,
			"org.opencontainers.image.title":    s.name,
			"org.opencontainers.image.version":  o.Version,
			"org.opencontainers.image.revision": o.Revision,
		},
	}
	if s.pause {
		files = []file{{name: "pause", mode: 0o755, data: binary}}
		cfg.Entrypoint = []string{"/pause"}
		cfg.User = fmt.Sprintf("%d:%d", pauseUser, pauseUser)
		cfg.Env = cfg.Env[:1]
		cfg.Labels["org.opencontainers.image.version"] = strings.TrimPrefix(s.ref, "registry.k8s.io/pause:")
	} else {
		files = nonrootFiles(ca)
		files = append(files, file{name: strings.TrimPrefix(BinaryPath, "/"), mode: 0o755, data: binary})
		cfg.Entrypoint = []string{BinaryPath}
		cfg.User = fmt.Sprintf("%d:%d", NonRoot, NonRoot)
		cfg.WorkingDir = "/home/nonroot"
	}
	layerTar, err := layerArchive(files, o.Epoch)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	created := v1.Time{Time: o.Epoch}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: created, CreatedBy: "make images (test/images)", Comment: s.name},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Config = cfg
	cf.Created = created
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	if s.arch != "" {
		cf.Architecture = s.arch
	}
	return mutate.ConfigFile(img, cf)
}

// Load reads the images a Build wrote to dir, from its digests.txt.
func Load(dir string) ([]Result, error) {
	data, err := os.ReadFile(filepath.Join(dir, "digests.txt"))
	if err != nil {
		return nil, fmt.Errorf("reading the images' list (make images): %w", err)
	}
	var results []Result
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("digests.txt: malformed line %q", line)
		}
		digest, err := v1.NewHash(f[1])
		if err != nil {
			return nil, fmt.Errorf("digests.txt: %w", err)
		}
		r := Result{Name: strings.TrimSuffix(f[2], ".tar"), Ref: f[0], Digest: digest, File: filepath.Join(dir, f[2])}
		st, err := os.Stat(r.File)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", r.Ref, err)
		}
		r.Size = st.Size()
		results = append(results, r)
	}
	return results, nil
}
