package ociimage

import (
	"bytes"
	"errors"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

const (
	// ModuleFile is the name Istio's and Envoy Gateway's fetchers look for in
	// the Wasm image's last layer.
	ModuleFile = "plugin.wasm"
	// WasmLayoutRefName names the Wasm image in an OCI layout's index.json, so
	// that tools copying out of the layout can address it (layout:skewgate).
	WasmLayoutRefName = "skewgate"
)

var wasmHeader = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// WasmImage packs a WebAssembly module in the layout the Wasm image
// specification calls the "compat" variant, which Istio's WasmPlugin and Envoy
// Gateway's EnvoyExtensionPolicy pull: an OCI image manifest whose single
// gzip-compressed tar layer holds the module as plugin.wasm. The config names
// the module's own platform, wasip1/wasm as Go builds it, not the packing
// machine's: the image holds no native code. The image is a pure function of
// the module's bytes.
func WasmImage(module []byte) (v1.Image, error) {
	if !bytes.HasPrefix(module, wasmHeader) {
		return nil, errors.New("not a WebAssembly binary module (it must start with \\0asm version 1)")
	}
	return image([]file{{name: ModuleFile, mode: 0o644, content: module}},
		v1.Config{}, v1.Platform{OS: "wasip1", Architecture: "wasm"})
}
