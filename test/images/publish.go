package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// DefaultPlatforms are the platforms Publish builds by default.
var DefaultPlatforms = []string{"linux/amd64", "linux/arm64"}

// PublishOptions say where Publish pushes the release images.
type PublishOptions struct {
	// Repo is REGISTRY[/PATH]: the images go to Repo/swh-controller and
	// Repo/swh-agent, tagged with Options.Version.
	Repo string
	// Platforms are the linux/ARCH images of each index
	// (DefaultPlatforms when empty).
	Platforms []string
	// Insecure allows a registry without TLS (plain HTTP).
	Insecure bool
}

// Published is one image index pushed.
type Published struct {
	// Name is swh-controller or swh-agent; Ref is Repo/Name:Version.
	Name, Ref string
	// Digest is the index's: pull by Ref@Digest to get exactly it.
	Digest v1.Hash
}

// Publish builds the controller and agent images for every platform, as
// Build does (the same layers and configs, reproducible), and pushes one
// image index per binary to the registry, with the credentials of the
// Docker configuration ($DOCKER_CONFIG, ~/.docker/config.json: docker
// login or crane auth login).
func Publish(ctx context.Context, o Options, p PublishOptions) ([]Published, error) {
	if p.Repo == "" {
		return nil, errors.New("images: no repository to publish to")
	}
	if len(p.Platforms) == 0 {
		p.Platforms = DefaultPlatforms
	}
	if err := o.complete(ctx); err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("reading the CA bundle (Debian's ca-certificates package): %w", err)
	}
	bin, err := os.MkdirTemp("", "swh-publish-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(bin)
	indexes := map[string]v1.ImageIndex{}
	for _, platform := range p.Platforms {
		osName, arch, ok := strings.Cut(platform, "/")
		if !ok || osName != "linux" || arch == "" {
			return nil, fmt.Errorf("platform %q: want linux/ARCH", platform)
		}
		dir := filepath.Join(bin, arch)
		if err := buildRelease(ctx, o, dir, arch); err != nil {
			return nil, err
		}
		for _, component := range []string{"swh-controller", "swh-agent"} {
			binary, err := os.ReadFile(filepath.Join(dir, component))
			if err != nil {
				return nil, err
			}
			img, err := o.image(spec{name: component, arch: arch}, binary, ca)
			if err != nil {
				return nil, fmt.Errorf("image %s for %s: %w", component, platform, err)
			}
			idx, ok := indexes[component]
			if !ok {
				idx = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
			}
			indexes[component] = mutate.AppendManifests(idx, mutate.IndexAddendum{
				Add:        img,
				Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
			})
		}
	}
	var nameOpts []name.Option
	if p.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	var out []Published
	for _, component := range []string{"swh-controller", "swh-agent"} {
		refText := p.Repo + "/" + component + ":" + o.Version
		ref, err := name.ParseReference(refText, nameOpts...)
		if err != nil {
			return nil, fmt.Errorf("image reference %q: %w", refText, err)
		}
		fmt.Fprintf(o.Log, ">> pushing %s (%s)\n", refText, strings.Join(p.Platforms, ", "))
		if err := remote.WriteIndex(ref, indexes[component], remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return nil, fmt.Errorf("pushing %s: %w", refText, err)
		}
		digest, err := indexes[component].Digest()
		if err != nil {
			return nil, err
		}
		out = append(out, Published{Name: component, Ref: refText, Digest: digest})
	}
	return out, nil
}

// buildRelease compiles the release binaries for linux/arch into dir with
// hack/build-release.sh, as Build does for the machine's own.
func buildRelease(ctx context.Context, o Options, dir, arch string) error {
	fmt.Fprintf(o.Log, ">> release binaries for linux/%s: hack/build-release.sh controller agent\n", arch)
	cmd := exec.CommandContext(ctx, filepath.Join(o.Root, "hack", "build-release.sh"), dir, "controller", "agent")
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOOS=linux", "GOARCH="+arch, "VERSION="+o.Version,
		"GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -buildvcs=false"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hack/build-release.sh for linux/%s: %w\n%s", arch, err, out.String())
	}
	return nil
}
