package ociimage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/yaml"
)

const shippedDir = "../../../plugin/envoy"

// shippedImageURL reads the module's image reference the way each
// controller finds it in its custom resource.
var shippedImageURL = map[string]func([]byte) (string, error){
	"istio-wasmplugin.yaml": func(b []byte) (string, error) {
		var p struct {
			Spec struct {
				URL string `json:"url"`
			} `json:"spec"`
		}
		err := yaml.Unmarshal(b, &p)
		return p.Spec.URL, err
	},
	"envoy-gateway-extensionpolicy.yaml": func(b []byte) (string, error) {
		var p struct {
			Spec struct {
				Wasm []struct {
					Code struct {
						Image struct {
							URL string `json:"url"`
						} `json:"image"`
					} `json:"code"`
				} `json:"wasm"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(b, &p); err != nil || len(p.Spec.Wasm) != 1 {
			return "", err
		}
		return p.Spec.Wasm[0].Code.Image.URL, nil
	},
}

// TestShippedManifestsPinTheBuiltModule fails whenever the plugin changes
// until `make oci` writes the new module's digest into the manifests.
func TestShippedManifestsPinTheBuiltModule(t *testing.T) {
	want := mustDigest(t, mustImage(t, readBuiltModule(t)))
	for file, imageURL := range shippedImageURL {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join(shippedDir, file)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			url, err := imageURL(b)
			if err != nil {
				t.Fatal(err)
			}
			// Istio takes an oci:// URL, Envoy Gateway a bare reference;
			// both hand the rest to go-containerregistry's parser.
			ref, err := name.NewDigest(strings.TrimPrefix(url, "oci://"))
			if err != nil {
				t.Fatalf("plugin/envoy/%s: image %q is not a reference by digest: %v", file, url, err)
			}
			if ref.DigestStr() != want.String() {
				t.Fatalf("plugin/envoy/%s pins %s, but build/skewgate.wasm packs to %s.\n"+
					"Run `make oci` to pin the module as built (it rebuilds build/skewgate.wasm and rewrites the digests).",
					file, ref.DigestStr(), want)
			}
			if _, err := SetManifestDigest(b, want); err != nil {
				t.Errorf("plugin/envoy/%s: `make oci` could not update it: %v", file, err)
			}
		})
	}
}
