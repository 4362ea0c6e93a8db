package envoyconfig

import (
	"encoding/json"
	"testing"
)

// A plugin configuration Envoy would load only for the plugin to refuse it is
// refused when rendered, in the plugin's words.
func TestRenderRefusesEveryPluginValueThePluginRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		field string
		value any
		want  string
	}{
		{"negative retry after", "retryAfterSeconds", -1, "envoyconfig: plugin configuration: retryAfterSeconds: must be an integer from 1 to 3600, got -1"},
		{"retry after as a string", "retryAfterSeconds", "5", `retryAfterSeconds: must be an integer from 1 to 3600, got "5"`},
		{"authorization cache too long", "discoveryAuthorizationCacheSeconds", 301, "discoveryAuthorizationCacheSeconds: must be an integer from 0 to 300, got 301"},
		{"misspelt identity mode", "identityMode", "frontproxy", `identityMode: must be "passthrough" or "front-proxy", got "frontproxy"`},
		{"upper-case routing header", "routingHeader", "X-Skewgate-Upstream", `routingHeader: not a lower-case HTTP header name (RFC 9110 token), got "X-Skewgate-Upstream"`},
		{"trust flag not a boolean", "trustPeerProxiedHeader", "no", `trustPeerProxiedHeader: must be true or false, got "no"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := exampleSpec()
			var doc map[string]any
			if err := json.Unmarshal(spec.PluginConfig, &doc); err != nil {
				t.Fatal(err)
			}
			doc[tc.field] = tc.value
			var err error
			if spec.PluginConfig, err = json.Marshal(doc); err != nil {
				t.Fatal(err)
			}
			_, err = Render(spec)
			if !errorContains(err, tc.want) {
				t.Errorf("Render error %v, want one containing %q", err, tc.want)
			}
			if err := spec.CheckPluginConfig(spec.PluginConfig); !errorContains(err, tc.want) {
				t.Errorf("CheckPluginConfig error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
