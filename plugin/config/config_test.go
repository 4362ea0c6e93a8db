package config

import (
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

var snapshot = string(discoverytest.SnapshotJSON(1, discoverytest.SkewedControlPlane()))

// withFields is a configuration of the test snapshot and the given members
// ("name":value, ...).
func withFields(members string) []byte {
	if members != "" {
		members += ","
	}
	return []byte(`{` + members + `"snapshot":` + snapshot + `}`)
}

func TestAConfigurationWithOnlyASnapshotGetsTheDefaults(t *testing.T) {
	cfg, err := Parse(withFields(""))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Options != Defaults() {
		t.Errorf("options %+v; want the defaults %+v", cfg.Options, Defaults())
	}
	if cfg.Snapshot == nil || cfg.Snapshot.Generation != 1 || len(cfg.Snapshot.Servers) != 3 {
		t.Errorf("snapshot %+v; want generation 1 with 3 servers", cfg.Snapshot)
	}
	want := Options{RoutingHeader: "x-skewgate-upstream", RetryAfterSeconds: 5, IdentityMode: "passthrough", DiscoveryAuthorizationCacheSeconds: 10,
		SchemaSkewRouting: "reads-and-writes"}
	if Defaults() != want {
		t.Errorf("defaults %+v; want %+v", Defaults(), want)
	}
}

// Unknown fields are rejected by name, the empty name too: a typo'd or
// truncated key must not pass as if the field were absent.
func TestParseRejectsEveryUnknownFieldByName(t *testing.T) {
	for _, tt := range []struct{ name, field, want string }{
		{"misspelt", "retryAfterSecond", `configuration: unknown field "retryAfterSecond" in schema 1.0`},
		{"empty", "", `configuration: unknown field "" in schema 1.0`},
		{"escaped", `r\u00e9try`, `configuration: unknown field "rétry" in schema 1.0`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(withFields(`"` + tt.field + `":1`))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v; want %s", err, tt.want)
			}
		})
	}
}

// badValues is every kind of value the plugin refuses, as a configuration
// member and as the Options a host would write it from, with the message.
var badValues = []struct {
	name   string
	member string
	edit   func(*Options) // nil: Options cannot hold the value
	want   string
}{
	{"upper-case routing header", `"routingHeader":"X-Upper"`, func(o *Options) { o.RoutingHeader = "X-Upper" },
		`configuration: routingHeader: not a lower-case HTTP header name (RFC 9110 token), got "X-Upper"`},
	{"empty routing header", `"routingHeader":""`, func(o *Options) { o.RoutingHeader = "" }, `configuration: routingHeader: must not be empty, got ""`},
	{"pseudo-header as routing header", `"routingHeader":":authority"`, func(o *Options) { o.RoutingHeader = ":authority" }, "routingHeader: not a lower-case HTTP header name"},
	{"routing header with a space", `"routingHeader":"x a"`, func(o *Options) { o.RoutingHeader = "x a" }, "routingHeader: not a lower-case HTTP header name"},
	{"identity header as routing header", `"routingHeader":"x-remote-user"`, func(o *Options) { o.RoutingHeader = "x-remote-user" }, "routingHeader: reserved by the plugin"},
	{"peer-proxied header as routing header", `"routingHeader":"x-kubernetes-peer-proxied"`, func(o *Options) { o.RoutingHeader = "x-kubernetes-peer-proxied" }, "routingHeader: reserved by the plugin"},
	{"routing header not a string", `"routingHeader":5`, nil, "configuration: routingHeader: must be a string, got 5"},
	{"negative retry after", `"retryAfterSeconds":-1`, func(o *Options) { o.RetryAfterSeconds = -1 },
		"configuration: retryAfterSeconds: must be an integer from 1 to 3600, got -1"},
	{"zero retry after", `"retryAfterSeconds":0`, func(o *Options) { o.RetryAfterSeconds = 0 }, "retryAfterSeconds: must be an integer from 1 to 3600, got 0"},
	{"retry after over an hour", `"retryAfterSeconds":3601`, func(o *Options) { o.RetryAfterSeconds = 3601 }, "retryAfterSeconds: must be an integer from 1 to 3600, got 3601"},
	{"fractional retry after", `"retryAfterSeconds":1.5`, nil, "retryAfterSeconds: must be an integer from 1 to 3600, got 1.5"},
	{"retry after as a string", `"retryAfterSeconds":"5"`, nil, `retryAfterSeconds: must be an integer from 1 to 3600, got "5"`},
	{"misspelt identity mode", `"identityMode":"frontproxy"`, func(o *Options) { o.IdentityMode = "frontproxy" },
		`configuration: identityMode: must be "passthrough" or "front-proxy", got "frontproxy"`},
	{"upper-case identity mode", `"identityMode":"Passthrough"`, func(o *Options) { o.IdentityMode = "Passthrough" }, `identityMode: must be "passthrough" or "front-proxy", got "Passthrough"`},
	{"empty identity mode", `"identityMode":""`, func(o *Options) { o.IdentityMode = "" }, `identityMode: must be "passthrough" or "front-proxy", got ""`},
	{"identity mode not a string", `"identityMode":true`, nil, `identityMode: must be "passthrough" or "front-proxy", got true`},
	{"negative authorization cache", `"discoveryAuthorizationCacheSeconds":-1`, func(o *Options) { o.DiscoveryAuthorizationCacheSeconds = -1 },
		"configuration: discoveryAuthorizationCacheSeconds: must be an integer from 0 to 300, got -1"},
	{"authorization cache over five minutes", `"discoveryAuthorizationCacheSeconds":301`, func(o *Options) { o.DiscoveryAuthorizationCacheSeconds = 301 },
		"discoveryAuthorizationCacheSeconds: must be an integer from 0 to 300, got 301"},
	{"trust flag not a boolean", `"trustPeerProxiedHeader":"yes"`, nil, `configuration: trustPeerProxiedHeader: must be true or false, got "yes"`},
	{"unknown schema skew routing", `"schemaSkewRouting":"reads"`, func(o *Options) { o.SchemaSkewRouting = "reads" },
		`configuration: schemaSkewRouting: must be "reads-and-writes" or "writes", got "reads"`},
	{"empty schema skew routing", `"schemaSkewRouting":""`, func(o *Options) { o.SchemaSkewRouting = "" }, `schemaSkewRouting: must be "reads-and-writes" or "writes", got ""`},
	{"schema skew routing not a string", `"schemaSkewRouting":false`, nil, `schemaSkewRouting: must be "reads-and-writes" or "writes", got false`},
}

func TestParseRejectsEveryBadValueNamingTheField(t *testing.T) {
	for _, tc := range badValues {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(withFields(tc.member)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want one containing %s", err, tc.want)
			}
		})
	}
}

// The host refuses to write exactly what the plugin refuses to read, in the
// same words.
func TestMarshalRefusesWhatThePluginRefuses(t *testing.T) {
	for _, tc := range badValues {
		if tc.edit == nil {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			opts := Defaults()
			tc.edit(&opts)
			_, parseErr := Parse(withFields(tc.member))
			out, err := opts.Marshal([]byte(snapshot))
			if err == nil || parseErr == nil || err.Error() != parseErr.Error() {
				t.Errorf("Marshal = %s, %v; want the plugin's error %v", out, err, parseErr)
			}
			if check := opts.Check(); check == nil || check.Error() != err.Error() {
				t.Errorf("Check = %v; want Marshal's error %v", check, err)
			}
		})
	}
}

func TestMarshalledOptionsParseBackToThemselves(t *testing.T) {
	for _, opts := range []Options{
		Defaults(),
		{RoutingHeader: "x-a!#$%&'*+-.^_`|~9", RetryAfterSeconds: MaxRetryAfterSeconds, TrustPeerProxiedHeader: true,
			IdentityMode: IdentityFrontProxy, DiscoveryAuthorizationCacheSeconds: MaxDiscoveryAuthorizationCacheSeconds, SchemaSkewRouting: SchemaSkewWrites},
		{RoutingHeader: "x", RetryAfterSeconds: 1, IdentityMode: IdentityPassthrough, SchemaSkewRouting: SchemaSkewReadsAndWrites},
	} {
		t.Run(opts.RoutingHeader, func(t *testing.T) {
			raw, err := opts.Marshal([]byte(snapshot))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(string(raw), `"snapshot":`+snapshot+`}`) {
				t.Errorf("the snapshot is not embedded as it was: %s", raw)
			}
			cfg, err := Parse(raw)
			if err != nil {
				t.Fatalf("the plugin refuses %s: %v", raw, err)
			}
			if cfg.Options != opts {
				t.Errorf("parsed back as %+v; want %+v", cfg.Options, opts)
			}
		})
	}
}

func TestParseNeedsAValidSnapshot(t *testing.T) {
	for _, tc := range []struct{ name, raw, want string }{
		{"missing", `{}`, "configuration: snapshot: must be an object, got nothing (field missing)"},
		{"not an object", `{"snapshot":[]}`, "configuration: snapshot: must be an object, got []"},
		{"invalid", `{"snapshot":` + string((&discovery.Snapshot{}).AppendJSON(nil)) + `}`, "configuration: snapshot: generation"},
		{"not JSON", `{"snapshot":`, "configuration: not valid JSON"},
		{"not an object at all", `[]`, "configuration: must be a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse([]byte(tc.raw)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse error %v; want one containing %q", err, tc.want)
			}
		})
	}
}
