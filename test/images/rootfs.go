package images

import (
	"archive/tar"
	"bytes"
	"sort"
	"strings"
	"time"
)

// file is one entry of a layer; a name ending in "/" is a directory.
type file struct {
	name     string
	mode     int64
	uid, gid int
	data     []byte
}

// The files the distroless nonroot base gives (GoogleContainerTools/
// distroless common/BUILD.bazel and base/base.bzl): the same users and
// groups, home directories and /tmp, nsswitch.conf so that name lookups
// read /etc/hosts first. Its tzdata, netbase and os-release are left out:
// the binaries read none of them.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"tty:x:5:\n" +
		"staff:x:50:\n" +
		"nonroot:x:65532:\n"
	nsswitch = "passwd: files\ngroup: files\nshadow: files\n\nhosts: files dns\nnetworks: files\n\n" +
		"protocols: db files\nservices: db files\nethers: db files\nrpc: db files\n"
)

// nonrootFiles is the root filesystem of the swh and workload images, less
// the binary; ca is the CA bundle.
func nonrootFiles(ca []byte) []file {
	return []file{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/nsswitch.conf", mode: 0o644, data: []byte(nsswitch)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: NonRoot, gid: NonRoot},
		{name: "root/", mode: 0o700},
		{name: "tmp/", mode: 0o1777},
	}
}

// layerArchive writes the files as an uncompressed layer tar: sorted by
// name, fixed owners and modes, every mtime the source date, no user or
// group names, so equal files give equal bytes.
func layerArchive(files []file, mtime time.Time) ([]byte, error) {
	sorted := append([]file(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range sorted {
		h := &tar.Header{
			Name:    f.name,
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.gid,
			ModTime: mtime,
		}
		if strings.HasSuffix(f.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
