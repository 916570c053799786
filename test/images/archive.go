package images

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// writeArchive writes img as an OCI image layout (go-containerregistry's
// layout package) whose index names it ref, then archives that layout into
// file: the OCI image tarball ctr imports. The archive's entries are sorted
// with fixed modes and mtimes, so equal images give equal files.
func writeArchive(img v1.Image, ref, file string, mtime time.Time) error {
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(filepath.Dir(file), ".layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	err = p.AppendImage(img,
		layout.WithAnnotations(map[string]string{
			containerdNameAnnotation: ref,
			refNameAnnotation:        tagOf(ref),
		}),
		layout.WithPlatform(v1.Platform{OS: cf.OS, Architecture: cf.Architecture}))
	if err != nil {
		return err
	}

	tmp := file + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(out)
	// WalkDir visits in lexical order.
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		name, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(name), ModTime: mtime, Mode: 0o644, Typeflag: tar.TypeReg}
		if d.IsDir() {
			h.Name += "/"
			h.Mode, h.Typeflag = 0o755, tar.TypeDir
			return tw.WriteHeader(h)
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		h.Size = st.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// tagOf is the tag of a reference (registry.k8s.io/pause:3.10 → 3.10).
func tagOf(ref string) string {
	slash := strings.LastIndex(ref, "/")
	if colon := strings.LastIndex(ref, ":"); colon > slash {
		return ref[colon+1:]
	}
	return "latest"
}

// Read opens an image tarball written by Build: it unpacks the layout into
// dir (which it creates) and returns the image and the reference it carries.
func Read(file, dir string) (v1.Image, string, error) {
	if err := unpack(file, dir); err != nil {
		return nil, "", err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, "", err
	}
	manifest, err := idx.IndexManifest()
	if err != nil {
		return nil, "", err
	}
	if len(manifest.Manifests) != 1 {
		return nil, "", fmt.Errorf("%s: index lists %d manifests, want 1", file, len(manifest.Manifests))
	}
	desc := manifest.Manifests[0]
	ref := desc.Annotations[containerdNameAnnotation]
	if ref == "" {
		return nil, "", fmt.Errorf("%s: the index entry has no %s annotation", file, containerdNameAnnotation)
	}
	img, err := idx.Image(desc.Digest)
	if err != nil {
		return nil, "", err
	}
	return img, ref, nil
}

// unpack extracts the regular files and directories of a tar into dir,
// refusing names that would land outside it.
func unpack(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if !filepath.IsLocal(h.Name) {
			return fmt.Errorf("%s: entry %q is outside the archive", file, h.Name)
		}
		path := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			err = writeFile(path, tr)
		default:
			err = fmt.Errorf("%s: entry %q has type %c", file, h.Name, h.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
