// Command swh-images builds the images of make images without a Docker
// engine or a registry (package test/images): swh-controller and swh-agent
// from the static release binaries, the swh-workload test backend and the
// pod sandbox image registry.k8s.io/pause:3.10, as reproducible OCI image
// tarballs for `ctr -n k8s.io images import`. It prints every image's
// reference, digest, file and size.
//
// With -push REPO it builds the controller and agent images for every
// -platforms instead (linux/amd64 and linux/arm64 by default) and pushes
// them to REPO/swh-controller and REPO/swh-agent as image indexes, with the
// Docker configuration's credentials; it prints each reference and digest
// (and writes them to -published, for hack/push.sh).
//
// usage: swh-images [-out DIR] [-repo PREFIX] [-version TAG]   (from the repository)
//
//	swh-images -push REGISTRY/PATH [-platforms linux/amd64,linux/arm64] [-insecure] [-published FILE]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/swh-dev/swh/test/images"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "swh-images:", err)
		os.Exit(1)
	}
}

func run() error {
	var o images.Options
	flag.StringVar(&o.Out, "out", "_out/images", "output folder, relative to the repository's top")
	flag.StringVar(&o.Repo, "repo", images.DefaultRepo, "repository prefix of the swh and workload images")
	flag.StringVar(&o.Version, "version", "", "their tag and version label (default: the chart's appVersion)")
	flag.StringVar(&o.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle copied into the images (Debian's ca-certificates)")
	var p images.PublishOptions
	flag.StringVar(&p.Repo, "push", "", "push the controller and agent images to this REGISTRY/PATH instead of writing tarballs")
	platforms := flag.String("platforms", strings.Join(images.DefaultPlatforms, ","), "with -push: the linux/ARCH platforms of each image index")
	flag.BoolVar(&p.Insecure, "insecure", false, "with -push: the registry speaks plain HTTP")
	published := flag.String("published", "", "with -push: write NAME REF DIGEST lines of the pushed images to this file")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	o.Root = root
	if !filepath.IsAbs(o.Out) {
		o.Out = filepath.Join(root, o.Out)
	}
	o.Log = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if p.Repo != "" {
		p.Platforms = strings.Split(*platforms, ",")
		pushed, err := images.Publish(ctx, o, p)
		if err != nil {
			return err
		}
		var list strings.Builder
		for _, r := range pushed {
			fmt.Printf("%s@%s\n", r.Ref, r.Digest)
			fmt.Fprintf(&list, "%s %s %s\n", r.Name, r.Ref, r.Digest)
		}
		if *published != "" {
			return os.WriteFile(*published, []byte(list.String()), 0o644)
		}
		return nil
	}
	results, err := images.Build(ctx, o)
	if err != nil {
		return err
	}
	for _, r := range results {
		rel, err := filepath.Rel(root, r.File)
		if err != nil {
			rel = r.File
		}
		fmt.Printf("%-42s %s  %s (%.1f MB)\n", r.Ref, r.Digest, rel, float64(r.Size)/1e6)
	}
	return nil
}

// repoRoot is the nearest folder above the working directory with go.work.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run it inside the repository: no go.work above the working directory")
		}
		dir = parent
	}
}
