package ociimage

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"path"
	"regexp"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The server image is anonymous in its OCI layout: `ctr images import
// --base-name REPO --digests` then names it REPO@DIGEST alone, the reference
// the manifests pin (containerd 2 gives a named image no digest name).

// Where the server image holds its files: the binary on the image's PATH, so
// that the static Pod's command "skewgate" resolves, and the plugin module at
// the path the manifests pass to --wasm.
const (
	ServerBinary = "/usr/local/bin/skewgate"
	ServerModule = "/usr/local/lib/skewgate/skewgate.wasm"
	// XDSBinary is where the xDS management server's image holds skewgate-xds.
	XDSBinary = "/usr/local/bin/skewgate-xds"
	// RevisionLabel is the label that carries the source revision the binary
	// was built from.
	RevisionLabel = "org.opencontainers.image.revision"
)

// serverUser is the image's default user: no name, no home, no shell. The
// kubeadm manifest runs it as root, which owns kubeadm's private keys.
const serverUser = "65532:65532"

// revisionPattern is a commit, and "-dirty" when the tree held changes.
var revisionPattern = regexp.MustCompile(`^[0-9a-f]{40,64}(-dirty)?$`)

// ServerImage packs skewgate's server: the binary and the plugin module, one
// layer, no shell or other program, a non-root default user, and the source
// revision they were built from as RevisionLabel. The platform is the
// binary's own. The binary must be static (CGO_ENABLED=0): the image has no C
// library to load.
func ServerImage(binary, module []byte, revision string) (v1.Image, error) {
	if !bytes.HasPrefix(module, wasmHeader) {
		return nil, errors.New("the module is not a WebAssembly binary module")
	}
	arch, _, err := staticLinuxBinary(binary, revision)
	if err != nil {
		return nil, err
	}
	return image([]file{
		{name: ServerBinary[1:], mode: 0o755, content: binary},
		{name: ServerModule[1:], mode: 0o644, content: module},
	}, binaryConfig(ServerBinary, revision), v1.Platform{OS: "linux", Architecture: arch})
}

// XDSImage packs skewgate-xds, the controller and xDS management server of
// Envoy fleets, as ServerImage packs the server: the binary alone (Envoy
// loads the module, not skewgate-xds), on the same terms. A binary of another
// command is refused, so that the two images cannot be swapped.
func XDSImage(binary []byte, revision string) (v1.Image, error) {
	arch, mainPath, err := staticLinuxBinary(binary, revision)
	if err != nil {
		return nil, err
	}
	if path.Base(mainPath) != path.Base(XDSBinary) {
		return nil, fmt.Errorf("the binary is %s, not %s", mainPath, path.Base(XDSBinary))
	}
	return image([]file{{name: XDSBinary[1:], mode: 0o755, content: binary}},
		binaryConfig(XDSBinary, revision), v1.Platform{OS: "linux", Architecture: arch})
}

// staticLinuxBinary checks the revision and that binary is a static Go
// program for Linux, and returns its architecture and main package.
func staticLinuxBinary(binary []byte, revision string) (arch, mainPath string, err error) {
	if !revisionPattern.MatchString(revision) {
		return "", "", fmt.Errorf("revision %q is not a commit (with -dirty for a modified tree)", revision)
	}
	info, err := buildinfo.Read(bytes.NewReader(binary))
	if err != nil {
		return "", "", fmt.Errorf("the binary carries no Go build information: %w", err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["GOOS"] != "linux" {
		return "", "", fmt.Errorf("the binary is for %s; the image is for Linux nodes", settings["GOOS"])
	}
	f, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		return "", "", err
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", "", errors.New("the binary is linked dynamically; build it with CGO_ENABLED=0")
		}
	}
	return settings["GOARCH"], info.Path, nil
}

// binaryConfig runs entrypoint as the image's non-root default user, found by
// its name on PATH, and labels the image with its revision.
func binaryConfig(entrypoint, revision string) v1.Config {
	return v1.Config{
		Entrypoint: []string{entrypoint},
		Env:        []string{"PATH=" + path.Dir(entrypoint)},
		User:       serverUser,
		Labels:     map[string]string{RevisionLabel: revision},
	}
}
