// Command wasmoci packs the plugin module as a Wasm OCI image for Istio's
// WasmPlugin and Envoy Gateway's EnvoyExtensionPolicy, prints its digest,
// and optionally writes it as an OCI image layout, pushes it, and pins the
// digest in Kubernetes manifests.
//
//	wasmoci --wasm build/skewgate.wasm [--layout DIR] [--push REPO[:TAG]] [--manifest FILE]...
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/skewgate/skewgate/host/internal/cmdline"
	"github.com/skewgate/skewgate/host/internal/ociimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(cmdline.ExitCode("wasmoci", err, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cmdline.NewFlagSet("wasmoci", "wasmoci --wasm build/skewgate.wasm [--layout DIR] [--push REPO[:TAG]] [--manifest FILE]...",
		"Packs the plugin module as a Wasm OCI image, prints its digest, and optionally writes it as an OCI image\n"+
			"layout, pushes it, and pins the digest in Kubernetes manifests.", stderr)
	wasmPath := fs.String("wasm", "", "plugin module to pack (required)")
	layoutDir := fs.String("layout", "", "write the image as the only one of an OCI image layout in this directory, replacing the layout there")
	pushRef := fs.String("push", "", "push the image to this repository, e.g. HOST:PORT/skewgate/skewgate-wasm:v0.1.0 (credentials from the Docker config)")
	manifests := fs.StringArray("manifest", nil, "set the digest of this manifest's single image reference (…@sha256:…) to the image's (repeatable)")
	if err := cmdline.Parse(fs, args, false); err != nil {
		return err
	}
	if *wasmPath == "" {
		return errors.New("--wasm is required")
	}

	module, err := os.ReadFile(*wasmPath)
	if err != nil {
		return fmt.Errorf("--wasm: %w", err)
	}
	img, err := ociimage.WasmImage(module)
	if err != nil {
		return fmt.Errorf("--wasm %s: %w", *wasmPath, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s packs to %s\n", *wasmPath, digest)
	_, err = ociimage.Publish(ctx, img, ociimage.Publication{
		Layout: *layoutDir, RefName: ociimage.WasmLayoutRefName, Manifests: *manifests, Push: *pushRef,
	}, stdout, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	return err
}
