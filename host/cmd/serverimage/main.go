// Command serverimage packs skewgate's server as a container image (the binary
// and the plugin module, no shell, a non-root default user, labelled with the
// source revision), or skewgate-xds alone with --xds-binary, prints its digest, and optionally writes it as an OCI
// image layout and a tar of that layout, pushes it, and pins its digest in
// Kubernetes manifests.
//
//	serverimage --binary bin/skewgate --wasm build/skewgate.wasm --revision COMMIT [--layout DIR [--archive FILE]] [--push REPO[:TAG]] [--manifest FILE]...
//	serverimage --xds-binary bin/skewgate-xds --revision COMMIT [--layout DIR [--archive FILE]] [--push REPO[:TAG]] [--manifest FILE]...
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
	v1 "github.com/google/go-containerregistry/pkg/v1"
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
		"serverimage (--binary bin/skewgate --wasm build/skewgate.wasm | --xds-binary bin/skewgate-xds) --revision COMMIT [--layout DIR [--archive FILE]] [--push REPO[:TAG]] [--manifest FILE]...",
		"Packs skewgate's server, or skewgate-xds, as a container image, prints its digest, and optionally writes it as an OCI image\n"+
			"layout and a tar of it, pushes it, and pins the digest in Kubernetes manifests.", stderr)
	binaryPath := fs.String("binary", "", "static skewgate binary to pack (with --wasm)")
	wasmPath := fs.String("wasm", "", "plugin module to pack (with --binary)")
	xdsPath := fs.String("xds-binary", "", "static skewgate-xds binary to pack alone, instead of --binary and --wasm")
	revision := fs.String("revision", "", "the commit both were built from, with -dirty for a modified tree (required; the image's org.opencontainers.image.revision)")
	layoutDir := fs.String("layout", "", "write the image as the only one of an OCI image layout in this directory, replacing the layout there")
	archive := fs.String("archive", "", "write the layout as one tar file, which ctr images import, docker load and podman load read (needs --layout)")
	pushRef := fs.String("push", "", "push the image to this repository, e.g. HOST:PORT/skewgate/skewgate:v0.1.0 (credentials from the Docker config)")
	manifests := fs.StringArray("manifest", nil, "set the digest of this manifest's single image reference (…@sha256:…) to the image's, and the revision its comment records (repeatable; skipped for a binary built from a modified tree)")
	if err := cmdline.Parse(fs, args, false); err != nil {
		return err
	}
	if *revision == "" {
		return errors.New("--revision is required")
	}
	img, packed, err := pack(*binaryPath, *wasmPath, *xdsPath, *revision)
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	size, err := ociimage.CompressedSize(img)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "packed %s into %s (revision %s, %.1f MB compressed)\n", packed, digest, *revision, float64(size)/1e6)
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

// pack builds the server's image from --binary and --wasm, or skewgate-xds's
// from --xds-binary, and says what it packed.
func pack(binaryPath, wasmPath, xdsPath, revision string) (v1.Image, string, error) {
	switch {
	case xdsPath != "" && (binaryPath != "" || wasmPath != ""):
		return nil, "", errors.New("--xds-binary packs skewgate-xds alone: give it without --binary and --wasm")
	case xdsPath != "":
		binary, err := os.ReadFile(xdsPath)
		if err != nil {
			return nil, "", fmt.Errorf("--xds-binary: %w", err)
		}
		img, err := ociimage.XDSImage(binary, revision)
		if err != nil {
			return nil, "", fmt.Errorf("--xds-binary %s: %w", xdsPath, err)
		}
		return img, xdsPath, nil
	case binaryPath == "" || wasmPath == "":
		return nil, "", errors.New("--binary and --wasm are required (or --xds-binary alone)")
	}
	binary, err := os.ReadFile(binaryPath)
	if err != nil {
		return nil, "", fmt.Errorf("--binary: %w", err)
	}
	module, err := os.ReadFile(wasmPath)
	if err != nil {
		return nil, "", fmt.Errorf("--wasm: %w", err)
	}
	img, err := ociimage.ServerImage(binary, module, revision)
	if err != nil {
		return nil, "", fmt.Errorf("--binary %s, --wasm %s: %w", binaryPath, wasmPath, err)
	}
	return img, binaryPath + " and " + wasmPath, nil
}
