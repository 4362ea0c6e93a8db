package envoyconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

type objectMeta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// istioWasmPlugin mirrors extensions.istio.io/v1alpha1 WasmPlugin.
type istioWasmPlugin struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Selector *struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		TargetRefs      []policyTargetRef `json:"targetRefs"`
		URL             string            `json:"url"`
		SHA256          string            `json:"sha256"`
		ImagePullPolicy string            `json:"imagePullPolicy"`
		ImagePullSecret string            `json:"imagePullSecret"`
		PluginName      string            `json:"pluginName"`
		Type            string            `json:"type"`
		Phase           string            `json:"phase"`
		Priority        *int32            `json:"priority"`
		FailStrategy    string            `json:"failStrategy"`
		PluginConfig    json.RawMessage   `json:"pluginConfig"`
	} `json:"spec"`
}

type policyTargetRef struct {
	Group string `json:"group"`
	Kind  string `json:"kind"`
	Name  string `json:"name"`
}

// envoyGatewayExtensionPolicy mirrors the Wasm part of
// gateway.envoyproxy.io/v1alpha1 EnvoyExtensionPolicy.
type envoyGatewayExtensionPolicy struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		TargetRefs []policyTargetRef `json:"targetRefs"`
		Wasm       []struct {
			Name   string `json:"name"`
			RootID string `json:"rootID"`
			Code   struct {
				Type string `json:"type"`
				HTTP *struct {
					URL string `json:"url"`
				} `json:"http"`
				Image *struct {
					URL string `json:"url"`
				} `json:"image"`
				SHA256     string `json:"sha256"`
				PullPolicy string `json:"pullPolicy"`
			} `json:"code"`
			Config   json.RawMessage `json:"config"`
			FailOpen *bool           `json:"failOpen"`
		} `json:"wasm"`
	} `json:"spec"`
}

// decodeManifest reads a Kubernetes manifest strictly: duplicate keys and
// fields the custom resource does not define are errors.
func decodeManifest(t *testing.T, name string, into any) {
	t.Helper()
	js, err := yaml.YAMLToJSONStrict(readShipped(t, name))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func checkManifestHeader(apiVersion, kind string, meta objectMeta, wantAPIVersion, wantKind string) error {
	switch {
	case apiVersion != wantAPIVersion || kind != wantKind:
		return fmt.Errorf("%s %s, want %s %s", apiVersion, kind, wantAPIVersion, wantKind)
	case meta.Name == "" || meta.Namespace == "":
		return fmt.Errorf("metadata needs a name and a namespace, got %+v", meta)
	}
	return nil
}

func TestIstioWasmPluginManifestIsCompleteAndFailsClosed(t *testing.T) {
	var p istioWasmPlugin
	decodeManifest(t, "istio-wasmplugin.yaml", &p)
	if err := checkManifestHeader(p.APIVersion, p.Kind, p.Metadata, "extensions.istio.io/v1alpha1", "WasmPlugin"); err != nil {
		t.Fatal(err)
	}
	s := p.Spec
	if (s.Selector == nil || len(s.Selector.MatchLabels) == 0) && len(s.TargetRefs) == 0 {
		t.Error("the plugin must select workloads (selector or targetRefs)")
	}
	if u, err := url.Parse(s.URL); err != nil || !slices.Contains([]string{"oci", "http", "https", "file"}, u.Scheme) {
		t.Errorf("url %q: want an oci://, http(s):// or file:// module location", s.URL)
	}
	if s.PluginName != FilterName {
		t.Errorf("pluginName %q, want the root_id %q", s.PluginName, FilterName)
	}
	if s.Type != "HTTP" {
		t.Errorf("type %q, want HTTP", s.Type)
	}
	if !slices.Contains([]string{"AUTHN", "AUTHZ", "STATS", "UNSPECIFIED_PHASE"}, s.Phase) {
		t.Errorf("phase %q is not an Istio plugin phase", s.Phase)
	}
	if s.FailStrategy != "FAIL_CLOSE" {
		t.Errorf("failStrategy %q, want FAIL_CLOSE", s.FailStrategy)
	}
	if !slices.Contains([]string{"", "IfNotPresent", "Always"}, s.ImagePullPolicy) {
		t.Errorf("imagePullPolicy %q", s.ImagePullPolicy)
	}
	if _, err := parsePluginConfig(s.PluginConfig); err != nil {
		t.Errorf("pluginConfig: %v", err)
	}
}

func TestEnvoyGatewayExtensionPolicyManifestIsCompleteAndFailsClosed(t *testing.T) {
	var p envoyGatewayExtensionPolicy
	decodeManifest(t, "envoy-gateway-extensionpolicy.yaml", &p)
	if err := checkManifestHeader(p.APIVersion, p.Kind, p.Metadata, "gateway.envoyproxy.io/v1alpha1", "EnvoyExtensionPolicy"); err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.TargetRefs) == 0 {
		t.Error("the policy must target a Gateway or route")
	}
	for _, ref := range p.Spec.TargetRefs {
		if ref.Group != "gateway.networking.k8s.io" || ref.Kind == "" || ref.Name == "" {
			t.Errorf("target %+v must name a Gateway API object", ref)
		}
	}
	if len(p.Spec.Wasm) != 1 {
		t.Fatalf("want one wasm extension, got %d", len(p.Spec.Wasm))
	}
	w := p.Spec.Wasm[0]
	if w.Name == "" || w.RootID != FilterName {
		t.Errorf("name %q and rootID %q: want a name and the root_id %q", w.Name, w.RootID, FilterName)
	}
	switch code := w.Code; {
	case code.Type == "HTTP" && code.HTTP != nil && code.HTTP.URL != "" && code.Image == nil:
	case code.Type == "Image" && code.Image != nil && code.Image.URL != "" && code.HTTP == nil:
	default:
		t.Errorf("code type %q must come with exactly its own source", code.Type)
	}
	if w.FailOpen == nil || *w.FailOpen {
		t.Error("failOpen must be set to false explicitly")
	}
	if _, err := parsePluginConfig(w.Config); err != nil {
		t.Errorf("config: %v", err)
	}
}
