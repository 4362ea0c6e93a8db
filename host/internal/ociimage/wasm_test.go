package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// emptyModule is the smallest valid WebAssembly module: the header alone.
var emptyModule = []byte("\x00asm\x01\x00\x00\x00")

// moduleWith is a valid module whose bytes differ by a custom section.
func moduleWith(payload string) []byte {
	section := append([]byte{0, byte(len(payload) + 2), 1, 'x'}, payload...)
	return append(bytes.Clone(emptyModule), section...)
}

func mustImage(t *testing.T, module []byte) v1.Image {
	t.Helper()
	img, err := WasmImage(module)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func mustDigest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// fetchedModule reads img the way Istio's and Envoy Gateway's image fetchers
// (pkg/wasm and internal/wasm, extractOCIStandardImage) read the compat
// variant: an OCI manifest, the last layer of type
// application/vnd.oci.image.layer.v1.tar+gzip, and in it the entry whose base
// name is plugin.wasm. It also holds the image to what the packer promises:
// OCI media types throughout, one layer, one entry.
func fetchedModule(img v1.Image) ([]byte, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	switch {
	case m.MediaType != types.OCIManifestSchema1:
		return nil, fmt.Errorf("manifest media type %q, want %q", m.MediaType, types.OCIManifestSchema1)
	case m.Config.MediaType != types.OCIConfigJSON:
		return nil, fmt.Errorf("config media type %q, want %q", m.Config.MediaType, types.OCIConfigJSON)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	if len(layers) != 1 {
		return nil, fmt.Errorf("%d layers, want 1", len(layers))
	}
	if mt, err := layers[0].MediaType(); err != nil || mt != types.OCILayer {
		return nil, fmt.Errorf("layer media type %q (%v), want %q", mt, err, types.OCILayer)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	h, err := tr.Next()
	if err != nil {
		return nil, err
	}
	if filepath.Base(h.Name) != ModuleFile || h.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("layer entry %q (type %c), want the regular file %s", h.Name, h.Typeflag, ModuleFile)
	}
	module, err := io.ReadAll(tr)
	if err != nil {
		return nil, err
	}
	if _, err := tr.Next(); err != io.EOF {
		return nil, fmt.Errorf("the layer holds more than %s (%v)", ModuleFile, err)
	}
	return module, nil
}

func TestImageIsTheCompatVariantIstioAndEnvoyGatewayRead(t *testing.T) {
	module := moduleWith("skewgate")
	got, err := fetchedModule(mustImage(t, module))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, module) {
		t.Errorf("the image yields %q, want the packed module %q", got, module)
	}
}

func TestImageDigestIsAFunctionOfTheModuleBytesAlone(t *testing.T) {
	a, b := moduleWith("a"), moduleWith("b")
	first := mustDigest(t, mustImage(t, a))
	if again := mustDigest(t, mustImage(t, bytes.Clone(a))); again != first {
		t.Errorf("the same module packs to %s and %s", first, again)
	}
	if other := mustDigest(t, mustImage(t, b)); other == first {
		t.Errorf("two different modules both pack to %s", first)
	}
}

// TestImageCarriesNoTimestampOrOwner pins the fields that would otherwise make
// a pack depend on the clock or the machine that ran it.
func TestImageCarriesNoTimestampOrOwner(t *testing.T) {
	img := mustImage(t, emptyModule)
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Created.Equal(epoch) || len(cfg.History) != 1 || !cfg.History[0].Created.Equal(epoch) {
		t.Errorf("config created %v, history %+v: want the Unix epoch throughout", cfg.Created, cfg.History)
	}
	if cfg.OS != "wasip1" || cfg.Architecture != "wasm" {
		t.Errorf("platform %s/%s, want wasip1/wasm", cfg.OS, cfg.Architecture)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" || zr.Comment != "" {
		t.Errorf("gzip header mtime %v, name %q, comment %q: want none", zr.ModTime, zr.Name, zr.Comment)
	}
	h, err := tar.NewReader(zr).Next()
	if err != nil {
		t.Fatal(err)
	}
	if !h.ModTime.Equal(epoch) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || len(h.PAXRecords) != 0 {
		t.Errorf("tar header %+v: want the epoch, root, no names and no PAX records", h)
	}
}

func TestImageRejectsWhatIsNotAWasmBinaryModule(t *testing.T) {
	for name, in := range map[string][]byte{
		"empty":          nil,
		"text":           []byte("plugin"),
		"truncated":      emptyModule[:7],
		"version 2":      []byte("\x00asm\x02\x00\x00\x00"),
		"component":      []byte("\x00asm\x0d\x00\x01\x00"),
		"gzipped module": gzipped(t, emptyModule),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := WasmImage(in); err == nil || !strings.Contains(err.Error(), "WebAssembly") {
				t.Errorf("WasmImage(%q) = %v, want an error saying it is not a WebAssembly module", in, err)
			}
		})
	}
}

func gzipped(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSetManifestDigestReplacesTheOneImageDigest(t *testing.T) {
	old := "sha256:" + strings.Repeat("0", 64)
	d := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	for _, tc := range []struct {
		name, in, want, wantErr string
	}{
		{name: "istio oci url",
			in:   "spec:\n  url: oci://registry.example.com/skewgate/skewgate-wasm@" + old + "\n  # keep @me\n",
			want: "spec:\n  url: oci://registry.example.com/skewgate/skewgate-wasm@" + d.String() + "\n  # keep @me\n"},
		{name: "envoy gateway image url",
			in:   "image:\n  url: registry.example.com/skewgate/skewgate-wasm@" + old + "\n",
			want: "image:\n  url: registry.example.com/skewgate/skewgate-wasm@" + d.String() + "\n"},
		{name: "already current", in: "url: r/x@" + d.String(), want: "url: r/x@" + d.String()},
		{name: "tag only", in: "url: r/x:v0.1.0\n", wantErr: "no image reference by digest"},
		{name: "digest too long", in: "url: r/x@" + old + "0\n", wantErr: "no image reference by digest"},
		{name: "two references", in: "a: r/x@" + old + "\nb: r/y@" + old + "\n", wantErr: "2 image references"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SetManifestDigest([]byte(tc.in), d)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %v, want one saying %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case string(got) != tc.want:
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestSetManifestDigestRefusesANonSHA256Digest(t *testing.T) {
	in := []byte("url: r/x@sha256:" + strings.Repeat("0", 64))
	if _, err := SetManifestDigest(in, v1.Hash{Algorithm: "sha512", Hex: strings.Repeat("0", 128)}); err == nil {
		t.Error("a sha512 digest was written where the fetchers verify sha256")
	}
}

func TestWriteLayoutHoldsOnlyTheNewestImage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "oci")
	older, newer := moduleWith("older"), moduleWith("newer")
	for _, module := range [][]byte{older, newer} {
		if err := WriteLayout(dir, mustImage(t, module), WasmLayoutRefName); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want := mustDigest(t, mustImage(t, newer))
	if len(im.Manifests) != 1 || im.Manifests[0].Digest != want || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != WasmLayoutRefName {
		t.Fatalf("index %+v: want the one image %s named %s", im.Manifests, want, WasmLayoutRefName)
	}
	img, err := idx.Image(want)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := fetchedModule(img); err != nil || !bytes.Equal(got, newer) {
		t.Errorf("the layout's image yields %q (%v), want %q", got, err, newer)
	}
	blobs, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	if len(blobs) != 3 {
		t.Errorf("%d blobs, want the manifest, config and layer of the newest image only", len(blobs))
	}
	raw, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Manifests []map[string]json.RawMessage `json:"manifests"`
	}
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	if _, ok := index.Manifests[0]["artifactType"]; ok {
		t.Errorf("index.json marks the image as an artifact: %s", raw)
	}
}

func TestWriteLayoutLeavesADirectoryThatIsNotALayout(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(dir, mustImage(t, emptyModule), WasmLayoutRefName); err == nil || !strings.Contains(err.Error(), "not an OCI image layout") {
		t.Errorf("error %v, want a refusal naming the directory", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("the directory's file is gone: %v", err)
	}
	entries, err := os.ReadDir(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != filepath.Base(dir) {
			t.Errorf("left %s behind", e.Name())
		}
	}
}
