// Command serverimage packs skewgate's server as a container image (the binary
// and the plugin module, no shell, a non-root default user, labelled with the
// source revision), prints its digest, and optionally writes it as an OCI
// image layout and a tar of that layout, pushes it, and pins its digest in
// Kubernetes manifests.
//
//	serverimage --binary bin/skewgate --wasm build/skewgate.wasm --revision COMMIT [--layout DIR [--archive FILE]] [--push REPO[:TAG]] [--manifest FILE]...
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/skewgate/skewgate/host/internal/cmdline"
	"github.com/skewgate/skewgate/host/internal/ociimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(cmdline.ExitCode("serverimage", err, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cmdline.NewFlagSet("serverimage",
		"serverimage --binary bin/skewgate --wasm build/skewgate.wasm --revision COMMIT [--layout DIR [--archive FILE]] [--push REPO[:TAG]] [--manifest FILE]...",
		"Packs skewgate's server as a container image, prints its digest, and optionally writes it as an OCI image\n"+
			"layout and a tar of it, pushes it, and pins the digest in Kubernetes manifests.", stderr)
	binaryPath := fs.String("binary", "", "static skewgate binary to pack (required)")
	wasmPath := fs.String("wasm", "", "plugin module to pack (required)")
	revision := fs.String("revision", "", "the commit both were built from, with -dirty for a modified tree (required; the image's org.opencontainers.image.revision)")
	layoutDir := fs.String("layout", "", "write the image as the only one of an OCI image layout in this directory, replacing the layout there")
	archive := fs.String("archive", "", "write the layout as one tar file, which ctr images import, docker load and podman load read (needs --layout)")
	pushRef := fs.String("push", "", "push the image to this repository, e.g. HOST:PORT/skewgate/skewgate:v0.1.0 (credentials from the Docker config)")
	manifests := fs.StringArray("manifest", nil, "set the digest of this manifest's single image reference (…@sha256:…) to the image's, and the revision its comment records (repeatable; skipped for a binary built from a modified tree)")
	if err := cmdline.Parse(fs, args, false); err != nil {
		return err
	}
	if *binaryPath == "" || *wasmPath == "" || *revision == "" {
		return errors.New("--binary, --wasm and --revision are required")
	}
	binary, err := os.ReadFile(*binaryPath)
	if err != nil {
		return fmt.Errorf("--binary: %w", err)
	}
	module, err := os.ReadFile(*wasmPath)
	if err != nil {
		return fmt.Errorf("--wasm: %w", err)
	}
	img, err := ociimage.ServerImage(binary, module, *revision)
	if err != nil {
		return fmt.Errorf("--binary %s, --wasm %s: %w", *binaryPath, *wasmPath, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	size, err := ociimage.CompressedSize(img)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s and %s pack to %s (revision %s, %.1f MB compressed)\n", *binaryPath, *wasmPath, digest, *revision, float64(size)/1e6)
	if strings.HasSuffix(*revision, "-dirty") && len(*manifests) > 0 {
		// A manifest pins an image anyone can rebuild from a commit.
		fmt.Fprintf(stdout, "not pinning %s: the binary was built from a modified tree; commit, then run again\n", strings.Join(*manifests, ", "))
		*manifests = nil
	}
	_, err = ociimage.Publish(ctx, img, ociimage.Publication{
		Layout: *layoutDir, Archive: *archive,
		Manifests: *manifests, Revision: *revision, Push: *pushRef,
	}, stdout, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	return err
}
