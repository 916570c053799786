package release_test

import (
	"archive/tar"
	"context"
	"debug/elf"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/swh-dev/swh/test/images"
)

// TestPublishMultiArch pushes the release images (images.Publish, what
// make push runs) for linux/amd64 and linux/arm64 to a registry on
// loopback, twice: each is an image index with one image per platform,
// whose config names the platform and whose binary is built for it, and
// the second push gives the same digests (reproducible).
func TestPublishMultiArch(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/swh"
	absRoot, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	publish := func() []images.Published {
		t.Helper()
		// An empty Docker configuration: no credentials from the machine.
		t.Setenv("DOCKER_CONFIG", t.TempDir())
		out, err := images.Publish(context.Background(),
			images.Options{Root: absRoot, Out: t.TempDir(), Version: "0.9.8", Log: io.Discard},
			images.PublishOptions{Repo: repo, Platforms: []string{"linux/amd64", "linux/arm64"}, Insecure: true})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	first, second := publish(), publish()
	if len(first) != 2 {
		t.Fatalf("published %+v, want swh-controller and swh-agent", first)
	}
	for i, p := range first {
		if p.Digest != second[i].Digest {
			t.Errorf("%s: two pushes gave %s and %s, want the same digest", p.Name, p.Digest, second[i].Digest)
		}
		ref, err := name.ParseReference(p.Ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := remote.Index(ref)
		if err != nil {
			t.Fatalf("%s: %v", p.Ref, err)
		}
		manifest, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if d, _ := idx.Digest(); d != p.Digest || len(manifest.Manifests) != 2 {
			t.Fatalf("%s: index %s with %d manifests, want %s with 2", p.Ref, d, len(manifest.Manifests), p.Digest)
		}
		for _, m := range manifest.Manifests {
			img, err := idx.Image(m.Digest)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if m.Platform == nil || m.Platform.OS != "linux" || cf.OS != "linux" || cf.Architecture != m.Platform.Architecture {
				t.Errorf("%s: manifest platform %+v, config %s/%s: want the same linux platform", p.Ref, m.Platform, cf.OS, cf.Architecture)
				continue
			}
			want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[cf.Architecture]
			if got := binaryMachine(t, img); got != want {
				t.Errorf("%s for %s: the binary is built for %v, want %v", p.Ref, cf.Architecture, got, want)
			}
		}
	}
}

// binaryMachine reads the ELF machine of the image's binary (/swh).
func binaryMachine(t *testing.T, img v1.Image) elf.Machine {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("want one layer: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("no %s in the layer", images.BinaryPath)
		}
		if err != nil {
			t.Fatal(err)
		}
		if "/"+strings.TrimPrefix(h.Name, "./") != images.BinaryPath {
			continue
		}
		f, err := os.CreateTemp(t.TempDir(), "swh-")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		e, err := elf.Open(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		return e.Machine
	}
}
