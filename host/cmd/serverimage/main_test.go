package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/skewgate/skewgate/host/internal/cmdline"
)

// The files `make build` leaves.
const (
	builtBinary = "../../../bin/skewgate"
	builtModule = "../../../build/skewgate.wasm"
)

const (
	revision = "0123456789abcdef0123456789abcdef01234567"
	zeros    = "0000000000000000000000000000000000000000"
)

func writeManifest(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "skewgate.yaml")
	body := "# built by `make image` at revision " + zeros + "\nimage: r/skewgate@sha256:" + strings.Repeat("0", 64) + "\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunPinsTheImageAndItsRevisionAndWritesLayoutAndArchive(t *testing.T) {
	dir := t.TempDir()
	manifest := writeManifest(t, dir)
	var out bytes.Buffer
	args := []string{"--binary", builtBinary, "--wasm", builtModule, "--revision", revision,
		"--layout", filepath.Join(dir, "image"), "--archive", filepath.Join(dir, "image.tar"), "--manifest", manifest}
	if err := run(t.Context(), args, &out, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	idx, err := layout.ImageIndexFromPath(filepath.Join(dir, "image"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) != 1 {
		t.Fatalf("layout index %+v (%v), want one image", im, err)
	}
	if len(im.Manifests[0].Annotations) != 0 {
		t.Errorf("layout names the image %v; want it anonymous, so that ctr images import --base-name REPO --digests names it REPO@DIGEST", im.Manifests[0].Annotations)
	}
	digest := im.Manifests[0].Digest.String()
	if !strings.Contains(out.String(), "into "+digest) {
		t.Errorf("output does not print the digest %s:\n%s", digest, out.String())
	}
	got, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	want := "# built by `make image` at revision " + revision + "\nimage: r/skewgate@" + digest + "\n"
	if string(got) != want {
		t.Errorf("manifest now reads\n%s\nwant\n%s", got, want)
	}
	if fi, err := os.Stat(filepath.Join(dir, "image.tar")); err != nil || fi.Size() == 0 {
		t.Errorf("no archive: %v", err)
	}
}

func TestRunDoesNotPinTheImageOfAModifiedTree(t *testing.T) {
	dir := t.TempDir()
	manifest := writeManifest(t, dir)
	before, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	args := []string{"--binary", builtBinary, "--wasm", builtModule, "--revision", revision + "-dirty", "--manifest", manifest}
	if err := run(t.Context(), args, &out, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if after, _ := os.ReadFile(manifest); !bytes.Equal(after, before) {
		t.Errorf("the manifest was pinned to a modified tree's image:\n%s", after)
	}
	if !strings.Contains(out.String(), "not pinning") {
		t.Errorf("output does not say why it did not pin:\n%s", out.String())
	}
}

func TestRunRejectsMissingInputsAsUsage(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"--binary", builtBinary}, &out, &out); err == nil || !strings.Contains(err.Error(), "required") {
		t.Errorf("error %v, want the required flags named", err)
	}
	if err := run(t.Context(), []string{"--xds-binary", "bin/skewgate-xds", "--binary", builtBinary, "--revision", revision}, &out, &out); err == nil || !strings.Contains(err.Error(), "--xds-binary") {
		t.Errorf("--xds-binary with --binary: error %v, want --xds-binary named", err)
	}
	if err := run(t.Context(), []string{"--binary", builtBinary, "--revision", revision}, &out, &out); err == nil || !strings.Contains(err.Error(), "--wasm") {
		t.Errorf("--binary without --wasm: error %v, want --wasm named", err)
	}
	if err := run(t.Context(), []string{"--no-such-flag"}, &out, &out); !errors.Is(err, cmdline.ErrUsage) {
		t.Errorf("error %v, want the usage error", err)
	}
	args := []string{"--binary", builtBinary, "--wasm", builtModule, "--revision", revision, "--archive", filepath.Join(t.TempDir(), "x.tar")}
	if err := run(t.Context(), args, &out, &out); err == nil || !strings.Contains(err.Error(), "layout") {
		t.Errorf("an archive without a layout: error %v", err)
	}
}
