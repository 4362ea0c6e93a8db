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
	"github.com/skewgate/skewgate/host/internal/ociimage"
)

const module = "\x00asm\x01\x00\x00\x00"

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunPinsTheModuleInManifestsAndTheLayout(t *testing.T) {
	dir := t.TempDir()
	wasm := writeFile(t, filepath.Join(dir, "skewgate.wasm"), module)
	manifest := writeFile(t, filepath.Join(dir, "plugin.yaml"), "url: oci://r/x@sha256:"+strings.Repeat("0", 64)+"\n")
	img, err := ociimage.WasmImage([]byte(module))
	if err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--wasm", wasm, "--layout", filepath.Join(dir, "oci"), "--manifest", manifest}

	var out bytes.Buffer
	if err := run(t.Context(), args, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "packs to "+digest.String()) || !strings.Contains(out.String(), "now references") {
		t.Errorf("output does not report the digest and the update:\n%s", out.String())
	}
	if got, _ := os.ReadFile(manifest); string(got) != "url: oci://r/x@"+digest.String()+"\n" {
		t.Errorf("manifest now reads %q", got)
	}
	idx, err := layout.ImageIndexFromPath(filepath.Join(dir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idx.Image(digest); err != nil {
		t.Errorf("the layout lacks image %s: %v", digest, err)
	}

	out.Reset()
	if err := run(t.Context(), args, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "already references "+digest.String()) {
		t.Errorf("a second run does not report the manifest as current:\n%s", out.String())
	}
}

func TestRunRejectsBadInputNamingTheFlag(t *testing.T) {
	dir := t.TempDir()
	wasm := writeFile(t, filepath.Join(dir, "skewgate.wasm"), module)
	text := writeFile(t, filepath.Join(dir, "notes.txt"), "not a module")
	tagged := writeFile(t, filepath.Join(dir, "tagged.yaml"), "url: oci://r/x:v1\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no module", nil, "--wasm is required"},
		{"missing module", []string{"--wasm", filepath.Join(dir, "absent.wasm")}, "--wasm:"},
		{"not a module", []string{"--wasm", text}, "--wasm " + text},
		{"stray argument", []string{"--wasm", wasm, "extra"}, "unexpected arguments"},
		{"manifest without a digest", []string{"--wasm", wasm, "--manifest", tagged}, "--manifest " + tagged},
		{"layout over a plain directory", []string{"--wasm", wasm, "--layout", dir}, "--layout"},
		{"unparsable push reference", []string{"--wasm", wasm, "--push", "Not A Reference"}, "--push"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(t.Context(), tc.args, &out, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if got, _ := os.ReadFile(tagged); string(got) != "url: oci://r/x:v1\n" {
		t.Errorf("a refused manifest was rewritten: %q", got)
	}
}

func TestRunReportsAnUnknownFlagAsUsage(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"--no-such-flag"}, &out, &out); !errors.Is(err, cmdline.ErrUsage) {
		t.Errorf("error %v, want the usage error", err)
	}
	if !strings.Contains(out.String(), "-wasm") {
		t.Errorf("no usage printed:\n%s", out.String())
	}
}
