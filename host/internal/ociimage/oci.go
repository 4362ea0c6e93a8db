// Package ociimage builds skewgate's OCI images and publishes them: the
// plugin module as a Wasm image for Istio and Envoy Gateway (WasmImage), and
// the server's container image with the binary and the module (ServerImage).
// Every image is a pure function of its inputs, so the same inputs always give
// the same manifest digest and manifests can pin it.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// epoch is every time an image records (go-containerregistry always writes
// the config's created, and tar headers carry an mtime): the time of packing
// would make each pack of the same inputs a different image.
var epoch = time.Unix(0, 0).UTC()

// refNameAnnotation names an image in an OCI layout's index.json.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// file is one regular file of a layer, at a path relative to the root.
type file struct {
	name    string
	mode    int64
	content []byte
}

// image is one layer holding files (and the directories above them) on an
// empty image, with OCI media types throughout and config's runtime settings.
func image(files []file, config v1.Config, platform v1.Platform) (v1.Image, error) {
	gz, err := layerBlob(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: platform.Architecture,
		OS:           platform.OS,
		Created:      v1.Time{Time: epoch},
		RootFS:       v1.RootFS{Type: "layers"},
		Config:       config,
	})
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
	return mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: epoch}}})
}

// layerBlob is the gzip-compressed tar of files, each directory above them
// listed once before its contents. Headers carry no time, owner or host;
// compress/gzip writes no name and a zero mtime.
func layerBlob(files []file) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	written := map[string]bool{}
	for _, f := range files {
		var dirs []string
		for d := path.Dir(f.name); d != "." && !written[d]; d = path.Dir(d) {
			dirs = append(dirs, d)
			written[d] = true
		}
		for _, d := range slices.Backward(dirs) {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatUSTAR}); err != nil {
				return nil, err
			}
		}
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeReg,
			Name:     f.name,
			Mode:     f.mode,
			Size:     int64(len(f.content)),
			ModTime:  epoch,
			Format:   tar.FormatUSTAR,
		}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteLayout writes img as the only image of an OCI image layout in dir,
// named refName in its index, or anonymous for an empty refName. The layout is built next to dir and renamed over
// it, so dir never holds blobs of an earlier image. A dir that exists but is
// not an OCI layout is refused rather than replaced.
func WriteLayout(dir string, img v1.Image, refName string) error {
	if _, err := os.Stat(dir); err == nil {
		if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
			return fmt.Errorf("%s exists and is not an OCI image layout; refusing to replace it", dir)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	if err := p.WriteImage(img); err != nil {
		return err
	}
	// Its own descriptor rather than AppendImage's, which would add an
	// artifactType: this is an image, not an artifact.
	d, err := img.Digest()
	if err != nil {
		return err
	}
	size, err := img.Size()
	if err != nil {
		return err
	}
	desc := v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: size, Digest: d}
	if refName != "" {
		desc.Annotations = map[string]string{refNameAnnotation: refName}
	}
	if err := p.AppendDescriptor(desc); err != nil {
		return err
	}
	// MkdirTemp creates 0700; the layout is an ordinary build output.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// Push uploads img to the repository ref names (a tag, or the repository
// alone for "latest") and returns the reference by digest that manifests pin.
// go-containerregistry speaks plain HTTP to loopback, localhost, *.local and
// private-network (RFC 1918) registries and HTTPS to every other.
func Push(ctx context.Context, ref string, img v1.Image, opts ...remote.Option) (name.Digest, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return name.Digest{}, fmt.Errorf("%q: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	if pinned, ok := r.(name.Digest); ok && pinned.DigestStr() != d.String() {
		return name.Digest{}, fmt.Errorf("%q pins %s, but the image packs to %s", ref, pinned.DigestStr(), d)
	}
	if err := remote.Write(r, img, append([]remote.Option{remote.WithContext(ctx)}, opts...)...); err != nil {
		return name.Digest{}, fmt.Errorf("%s: %w", r, err)
	}
	return r.Context().Digest(d.String()), nil
}

// imageDigest finds an image reference's digest in a manifest; the shipped
// manifests reference exactly one image, by digest.
var imageDigest = regexp.MustCompile(`@(sha256:[0-9a-f]{64})\b`)

// SetManifestDigest returns manifest with the digest of its single image
// reference (…@sha256:<hex>) replaced by d.
func SetManifestDigest(manifest []byte, d v1.Hash) ([]byte, error) {
	if d.Algorithm != "sha256" {
		return nil, fmt.Errorf("digest %s: want a sha256 digest", d)
	}
	switch n := len(imageDigest.FindAll(manifest, -1)); n {
	case 1:
	case 0:
		return nil, errors.New("no image reference by digest (…@sha256:<64 hex digits>) to update")
	default:
		return nil, fmt.Errorf("%d image references by digest; want exactly one", n)
	}
	return imageDigest.ReplaceAll(manifest, []byte("@"+d.String())), nil
}

// WriteArchive writes the OCI image layout in dir as one tar file, the form
// `ctr images import`, `docker load` and `podman load` read. Entries are in
// lexical order with fixed times and owners, so the same layout always gives
// the same file.
func WriteArchive(file, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return fmt.Errorf("%s is not an OCI image layout: %w", dir, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	tw := tar.NewWriter(tmp)
	// WalkDir visits a directory's entries in lexical order.
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch, Format: tar.FormatPAX}
		if d.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			return tw.WriteHeader(hdr)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		info, err := f.Stat()
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, info.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

// Publication says where Publish puts an image; empty fields are skipped.
type Publication struct {
	// Layout is a directory to write the image into as an OCI image layout,
	// named RefName in its index (anonymous if empty); Archive a file to write
	// that layout into as a tar (it needs Layout).
	Layout, RefName, Archive string
	// Manifests are files whose single image reference by digest is set to the
	// image's, and, with Revision, whose comment recording the revision the
	// image was built at is set to Revision.
	Manifests []string
	Revision  string
	// Push is a repository, with a tag or not, to push the image to.
	Push string
}

// Publish writes, pins and pushes img as p says, reporting each step on out,
// and returns the image's digest.
func Publish(ctx context.Context, img v1.Image, p Publication, out io.Writer, opts ...remote.Option) (v1.Hash, error) {
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	if p.Archive != "" && p.Layout == "" {
		return v1.Hash{}, errors.New("an archive is written from a layout: name one")
	}
	if p.Layout != "" {
		if err := WriteLayout(p.Layout, img, p.RefName); err != nil {
			return v1.Hash{}, fmt.Errorf("--layout: %w", err)
		}
		fmt.Fprintf(out, "wrote OCI image layout %s\n", p.Layout)
	}
	if p.Archive != "" {
		if err := WriteArchive(p.Archive, p.Layout); err != nil {
			return v1.Hash{}, fmt.Errorf("--archive: %w", err)
		}
		fmt.Fprintf(out, "wrote %s (the layout as a tar)\n", p.Archive)
	}
	for _, path := range p.Manifests {
		before, err := os.ReadFile(path)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("--manifest: %w", err)
		}
		after, err := SetManifestDigest(before, digest)
		if err == nil && p.Revision != "" {
			after, err = SetManifestRevision(after, p.Revision)
		}
		if err != nil {
			return v1.Hash{}, fmt.Errorf("--manifest %s: %w", path, err)
		}
		if bytes.Equal(after, before) {
			fmt.Fprintf(out, "%s already references %s\n", path, digest)
			continue
		}
		if err := os.WriteFile(path, after, 0o644); err != nil {
			return v1.Hash{}, fmt.Errorf("--manifest: %w", err)
		}
		fmt.Fprintf(out, "%s now references %s\n", path, digest)
	}
	if p.Push != "" {
		ref, err := Push(ctx, p.Push, img, opts...)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("--push %w", err)
		}
		fmt.Fprintf(out, "pushed %s\n", ref)
	}
	return digest, nil
}

// manifestRevision finds the revision a manifest records for its pinned
// image, in the comment `make image` writes above it.
var manifestRevision = regexp.MustCompile(`(# built by ` + "`make image`" + ` at revision )([0-9a-f]{40,64})\b`)

// ManifestRevision returns the revision a manifest's comment records for its
// pinned image.
func ManifestRevision(manifest []byte) (string, error) {
	m := manifestRevision.FindAllSubmatch(manifest, -1)
	if len(m) != 1 {
		return "", fmt.Errorf("%d comments %q; want exactly one", len(m), "# built by `make image` at revision <commit>")
	}
	return string(m[0][2]), nil
}

// SetManifestRevision returns manifest with the revision its comment records
// for the pinned image replaced by revision.
func SetManifestRevision(manifest []byte, revision string) ([]byte, error) {
	if _, err := ManifestRevision(manifest); err != nil {
		return nil, err
	}
	return manifestRevision.ReplaceAll(manifest, []byte("${1}"+revision)), nil
}

// CompressedSize is what pulling img transfers: its manifest, config and
// compressed layers.
func CompressedSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	size, err := img.Size()
	if err != nil {
		return 0, err
	}
	size += m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	return size, nil
}
