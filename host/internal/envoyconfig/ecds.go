package envoyconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// RenderECDSResource returns the file-based ECDS DiscoveryResponse that
// delivers the plugin filter: one TypedExtensionConfig named FilterName
// holding the same Wasm filter configuration Render puts inline.
//
// A changed pluginConfigJSON alone reuses the running Wasm VM (only the
// plugin's configure callback runs). New plugin code needs a new wasmPath,
// because Envoy does not watch the module file. version becomes version_info
// and should change with every write.
func RenderECDSResource(pluginConfigJSON []byte, wasmPath, version string) ([]byte, error) {
	if err := checkPath(wasmPath); err != nil {
		return nil, fmt.Errorf("envoyconfig: wasm path: %w", err)
	}
	if version == "" || strings.ContainsFunc(version, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return nil, fmt.Errorf("envoyconfig: ECDS version %q: must be non-empty printable text", version)
	}
	ext, err := extensionConfig(pluginConfigJSON, wasmPath)
	if err != nil {
		return nil, err
	}
	return marshalYAML(object{
		{"version_info", version},
		{"type_url", typedExtensionConfigURL},
		{"resources", list{append(object{{"@type", typedExtensionConfigURL}}, ext...)}},
	})
}

// RenderExtensionConfig returns the TypedExtensionConfig alone, as the ECDS
// file holds it, for a management server to deliver over xDS: the same
// document for the same arguments, byte for byte.
func RenderExtensionConfig(pluginConfigJSON []byte, wasmPath string) ([]byte, error) {
	if err := checkPath(wasmPath); err != nil {
		return nil, fmt.Errorf("envoyconfig: wasm path: %w", err)
	}
	ext, err := extensionConfig(pluginConfigJSON, wasmPath)
	if err != nil {
		return nil, err
	}
	return marshalYAML(ext)
}

// CheckWasmPath reports whether path can name the plugin module on an Envoy
// host in the documents rendered here.
func CheckWasmPath(path string) error { return checkPath(path) }

// extensionConfig is the TypedExtensionConfig delivering the plugin filter,
// named FilterName as the filter's config_discovery expects.
func extensionConfig(pluginConfigJSON []byte, wasmPath string) (object, error) {
	wasm, err := wasmFilterConfig(pluginConfigJSON, wasmPath)
	if err != nil {
		return nil, err
	}
	return object{{"name", FilterName}, {"typed_config", wasm}}, nil
}

// WriteECDSFile replaces path with content atomically: Envoy watching the
// directory reacts to the file being moved in, and must never read a partial
// file. The content is written to a temporary file in the same directory,
// flushed to disk, renamed over path, and the directory entry is flushed too.
func WriteECDSFile(path string, content []byte) (err error) {
	dir, base := filepath.Split(path)
	if base == "" {
		return fmt.Errorf("envoyconfig: ECDS file %q: not a file path", path)
	}
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("envoyconfig: ECDS file: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreNotExist(os.Remove(tmp.Name())))
		}
	}()
	if _, err := tmp.Write(content); err != nil {
		return errors.Join(fmt.Errorf("envoyconfig: ECDS file: %w", err), tmp.Close())
	}
	// Envoy may run as another user; the file holds no secrets.
	if err := tmp.Chmod(0o644); err != nil {
		return errors.Join(fmt.Errorf("envoyconfig: ECDS file: %w", err), tmp.Close())
	}
	if err := tmp.Sync(); err != nil {
		return errors.Join(fmt.Errorf("envoyconfig: ECDS file: %w", err), tmp.Close())
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("envoyconfig: ECDS file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("envoyconfig: ECDS file: %w", err)
	}
	return syncDir(dir)
}

// syncDir makes a completed rename durable across a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("envoyconfig: ECDS directory: %w", err)
	}
	if err := d.Sync(); err != nil {
		return errors.Join(fmt.Errorf("envoyconfig: ECDS directory: %w", err), d.Close())
	}
	return d.Close()
}

func ignoreNotExist(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
