// Package wasmoci packs the plugin module as an OCI image that Istio's
// WasmPlugin and Envoy Gateway's EnvoyExtensionPolicy pull, in the layout the
// Wasm image specification calls the "compat" variant: an OCI image manifest
// whose single gzip-compressed tar layer holds the module as plugin.wasm.
//
// The image is a pure function of the module's bytes, so the same module
// always has the same manifest digest and manifests can pin it.
package wasmoci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
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

const (
	// ModuleFile is the name Istio's and Envoy Gateway's fetchers look for in
	// the image's last layer.
	ModuleFile = "plugin.wasm"
	// LayoutRefName names the image in an OCI layout's index.json, so that
	// tools copying out of the layout can address it (layout:skewgate).
	LayoutRefName = "skewgate"
)

// epoch is every time the image records (go-containerregistry always writes
// the config's created, and tar headers carry an mtime): the time of packing
// would make each pack of the same module a different image.
var epoch = time.Unix(0, 0).UTC()

var wasmHeader = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// Image packs a WebAssembly module. The config names the module's own
// platform, wasip1/wasm as Go builds it, not the packing machine's: the image
// holds no native code.
func Image(module []byte) (v1.Image, error) {
	if !bytes.HasPrefix(module, wasmHeader) {
		return nil, errors.New("not a WebAssembly binary module (it must start with \\0asm version 1)")
	}
	gz, err := layerBlob(module)
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
		Architecture: "wasm",
		OS:           "wasip1",
		Created:      v1.Time{Time: epoch},
		RootFS:       v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
	return mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: epoch}}})
}

// layerBlob is the gzip-compressed tar holding the module. Both headers carry
// no time, owner or host; compress/gzip writes no name and a zero mtime.
func layerBlob(module []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg,
		Name:     ModuleFile,
		Mode:     0o644,
		Size:     int64(len(module)),
		ModTime:  epoch,
		Format:   tar.FormatUSTAR,
	}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(module); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteLayout writes img as the only image of an OCI image layout in dir. The
// layout is built next to dir and renamed over it, so dir never holds blobs of
// an earlier module. A dir that exists but is not an OCI layout is refused
// rather than replaced.
func WriteLayout(dir string, img v1.Image) error {
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
	if err := p.AppendDescriptor(v1.Descriptor{
		MediaType:   types.OCIManifestSchema1,
		Size:        size,
		Digest:      d,
		Annotations: map[string]string{"org.opencontainers.image.ref.name": LayoutRefName},
	}); err != nil {
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
		return name.Digest{}, fmt.Errorf("%q pins %s, but the module packs to %s", ref, pinned.DigestStr(), d)
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
