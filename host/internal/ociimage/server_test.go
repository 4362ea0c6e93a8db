package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// builtBinary is the server as `make build` leaves it.
const builtBinary = "../../../bin/skewgate"

var readBinary = sync.OnceValues(func() ([]byte, error) { return os.ReadFile(builtBinary) })

func readBuiltBinary(t *testing.T) []byte {
	t.Helper()
	b, err := readBinary()
	if err != nil {
		t.Fatalf("the built server is missing (run `make build`): %v", err)
	}
	return b
}

// testRevision is the revision the tests' images are labelled with.
const testRevision = "0123456789abcdef0123456789abcdef01234567"

func mustServerImage(t *testing.T, binary, module []byte, revision string) v1.Image {
	t.Helper()
	img, err := ServerImage(binary, module, revision)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// layerEntries lists the image's one layer: name, type and mode of each entry,
// and the regular files' contents.
func layerEntries(t *testing.T, img v1.Image) ([]string, map[string][]byte) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
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
	var entries []string
	files := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(epoch) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("entry %s: time %v, owner %d:%d %q:%q; want the epoch and root, unnamed", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		entries = append(entries, string(h.Typeflag)+" "+h.Name+" "+strings.TrimPrefix(os.FileMode(h.Mode).String(), "-"))
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files["/"+h.Name] = b
		}
	}
	return entries, files
}

func TestServerImageHoldsTheBinaryAndModuleAloneForANonRootUser(t *testing.T) {
	binary, module := readBuiltBinary(t), readBuiltModule(t)
	img := mustServerImage(t, binary, module, testRevision)
	entries, files := layerEntries(t, img)
	want := []string{
		"5 usr/ rwxr-xr-x", "5 usr/local/ rwxr-xr-x", "5 usr/local/bin/ rwxr-xr-x",
		"0 usr/local/bin/skewgate rwxr-xr-x",
		"5 usr/local/lib/ rwxr-xr-x", "5 usr/local/lib/skewgate/ rwxr-xr-x",
		"0 usr/local/lib/skewgate/skewgate.wasm rw-r--r--",
	}
	if !slices.Equal(entries, want) {
		t.Errorf("layer entries\n%s\nwant (no shell, nothing else)\n%s", strings.Join(entries, "\n"), strings.Join(want, "\n"))
	}
	if !bytes.Equal(files[ServerBinary], binary) || !bytes.Equal(files[ServerModule], module) {
		t.Errorf("the image's %s and %s differ from the packed files", ServerBinary, ServerModule)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User == "" || strings.HasPrefix(cfg.Config.User, "0") || strings.HasPrefix(cfg.Config.User, "root") {
		t.Errorf("default user %q, want a non-root one", cfg.Config.User)
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{ServerBinary}) || !slices.Equal(cfg.Config.Env, []string{"PATH=/usr/local/bin"}) {
		t.Errorf("entrypoint %q, env %q: want the binary, found as skewgate on PATH", cfg.Config.Entrypoint, cfg.Config.Env)
	}
	if cfg.OS != "linux" || cfg.Architecture == "" || !cfg.Created.Equal(epoch) {
		t.Errorf("platform %s/%s, created %v: want linux, the binary's architecture, the epoch", cfg.OS, cfg.Architecture, cfg.Created)
	}
	if got := cfg.Config.Labels[RevisionLabel]; got != testRevision {
		t.Errorf("label %s=%q, want %s", RevisionLabel, got, testRevision)
	}
}

func TestServerImageRefusesADynamicBinaryAnotherModuleOrNoRevision(t *testing.T) {
	binary, module := readBuiltBinary(t), readBuiltModule(t)
	if _, err := ServerImage(binary, []byte("plugin"), testRevision); err == nil || !strings.Contains(err.Error(), "WebAssembly") {
		t.Errorf("a module that is not WebAssembly: error %v", err)
	}
	if _, err := ServerImage([]byte("#!/bin/sh\n"), module, testRevision); err == nil || !strings.Contains(err.Error(), "build information") {
		t.Errorf("a script: error %v", err)
	}
	for _, revision := range []string{"", "HEAD", "v0.1.0", testRevision + "-modified"} {
		if _, err := ServerImage(binary, module, revision); err == nil || !strings.Contains(err.Error(), "not a commit") {
			t.Errorf("revision %q: error %v", revision, err)
		}
	}
	dynamic := filepath.Join(t.TempDir(), "dynamic")
	build := exec.Command("go", "build", "-o", dynamic, "./testdata/dynamic")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	b, err := os.ReadFile(dynamic)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ServerImage(b, module, testRevision); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("a dynamically linked binary: error %v", err)
	}
}

// TestServerImageArchiveIsReproducible builds the image and its layout and
// archive twice, from copies of the files with other times and modes in other
// directories: the digest and every byte of the archive are the same.
func TestServerImageArchiveIsReproducible(t *testing.T) {
	binary, module := readBuiltBinary(t), readBuiltModule(t)
	var digests []v1.Hash
	var archives [][]byte
	for i, mode := range []os.FileMode{0o755, 0o700} {
		dir := t.TempDir()
		for name, content := range map[string][]byte{"skewgate": binary, "skewgate.wasm": module} {
			if err := os.WriteFile(filepath.Join(dir, name), content, mode); err != nil {
				t.Fatal(err)
			}
		}
		b, err := os.ReadFile(filepath.Join(dir, "skewgate"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := os.ReadFile(filepath.Join(dir, "skewgate.wasm"))
		if err != nil {
			t.Fatal(err)
		}
		d, err := Publish(t.Context(), mustServerImage(t, b, m, testRevision), Publication{
			Layout: filepath.Join(dir, "image"), Archive: filepath.Join(dir, "image.tar"),
		}, io.Discard)
		if err != nil {
			t.Fatalf("build %d: %v", i, err)
		}
		archive, err := os.ReadFile(filepath.Join(dir, "image.tar"))
		if err != nil {
			t.Fatal(err)
		}
		digests, archives = append(digests, d), append(archives, archive)
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds from the same files: digests %s and %s", digests[0], digests[1])
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Errorf("two builds from the same files wrote different archives (%d and %d bytes)", len(archives[0]), len(archives[1]))
	}
}

// builtXDSBinary is skewgate-xds as `make build` leaves it.
const builtXDSBinary = "../../../bin/skewgate-xds"

func TestXDSImageHoldsSkewgateXDSAloneForANonRootUserAndRefusesTheServer(t *testing.T) {
	binary, err := os.ReadFile(builtXDSBinary)
	if err != nil {
		t.Fatalf("the built skewgate-xds is missing (run `make build`): %v", err)
	}
	img, err := XDSImage(binary, testRevision)
	if err != nil {
		t.Fatal(err)
	}
	entries, files := layerEntries(t, img)
	want := []string{
		"5 usr/ rwxr-xr-x", "5 usr/local/ rwxr-xr-x", "5 usr/local/bin/ rwxr-xr-x",
		"0 usr/local/bin/skewgate-xds rwxr-xr-x",
	}
	if !slices.Equal(entries, want) {
		t.Errorf("layer entries\n%s\nwant (no shell, nothing else)\n%s", strings.Join(entries, "\n"), strings.Join(want, "\n"))
	}
	if !bytes.Equal(files[XDSBinary], binary) {
		t.Errorf("the image's %s differs from the packed binary", XDSBinary)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != serverUser || !slices.Equal(cfg.Config.Entrypoint, []string{XDSBinary}) ||
		cfg.Config.Labels[RevisionLabel] != testRevision || cfg.OS != "linux" || !cfg.Created.Equal(epoch) {
		t.Errorf("config user %q, entrypoint %q, labels %v, os %s, created %v", cfg.Config.User, cfg.Config.Entrypoint,
			cfg.Config.Labels, cfg.OS, cfg.Created)
	}
	again, err := XDSImage(slices.Clone(binary), testRevision)
	if err != nil {
		t.Fatal(err)
	}
	if d1, d2 := mustDigest(t, img), mustDigest(t, again); d1 != d2 {
		t.Errorf("two builds of the same binary: digests %s and %s", d1, d2)
	}
	if _, err := XDSImage(readBuiltBinary(t), testRevision); err == nil || !strings.Contains(err.Error(), "not skewgate-xds") {
		t.Errorf("the server's binary packed as skewgate-xds: error %v", err)
	}
	if _, err := XDSImage(binary, "HEAD"); err == nil || !strings.Contains(err.Error(), "not a commit") {
		t.Errorf("revision HEAD: error %v", err)
	}
}
