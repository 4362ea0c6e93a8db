package main

import (
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/plugin/plugintest"
)

// Unknown fields are rejected by name, the empty name too: a typo'd or
// truncated key must not pass as if the field were absent.
func TestParseConfigRejectsEveryUnknownFieldByName(t *testing.T) {
	snapshot := string(plugintest.Config(t, 1, nil, discoverytest.SkewedControlPlane()))
	body := strings.TrimPrefix(snapshot, "{")
	for _, tt := range []struct{ name, field, want string }{
		{"misspelt", "retryAfterSecond", `configuration: unknown field "retryAfterSecond"`},
		{"empty", "", `configuration: unknown field ""`},
		{"escaped", `r\u00e9try`, `configuration: unknown field "rétry"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(`{"` + tt.field + `":1,` + body))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v; want %s", err, tt.want)
			}
		})
	}
}
