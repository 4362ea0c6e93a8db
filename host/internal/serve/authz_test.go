package serve

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestMergedDiscoveryIsAnsweredOnlyToClientsTheAPIServersAnswer(t *testing.T) {
	f := newFixture(t)
	const ttl = 2 * time.Second
	f.cfg.DiscoveryAuthorizationCache = ttl
	s := f.startServer(t)
	client := f.gatewayClient()
	discover := func(token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+s.GatewayAddr().String()+"/apis", nil)
		req.Header.Set("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	reads := func(token string) int {
		n := 0
		for _, srv := range f.servers {
			n += srv.count(srv.discoveryReads, "Bearer "+token)
		}
		return n
	}

	if code, body := discover("denied"); code != http.StatusForbidden || !strings.Contains(body, `"reason":"Forbidden"`) {
		t.Errorf("a client the API servers refuse: %d %s, want their 403", code, body)
	}
	// Only kube-c serves leasecandidates: the answer is the merged document.
	code, body := discover("allowed")
	if code != http.StatusOK || !strings.Contains(body, "leasecandidates") {
		t.Fatalf("a client the API servers answer: %d %.200s, want the merged document", code, body)
	}
	asked := time.Now()
	discover("allowed")
	if n := reads("allowed"); n != 1 {
		t.Errorf("the API servers were asked %d times within --discovery-authorization-cache, want once", n)
	}
	time.Sleep(time.Until(asked.Add(ttl + 500*time.Millisecond)))
	discover("allowed")
	if n := reads("allowed"); n != 2 {
		t.Errorf("the API servers were asked %d times in all, want again once --discovery-authorization-cache passed", n)
	}
}

func TestDiscoveryAuthorizationCacheOfZeroAsksOnEveryRequest(t *testing.T) {
	for _, tc := range []struct {
		cache time.Duration
		want  string
	}{
		{0, `"discoveryAuthorizationCacheSeconds":0`},
		{10 * time.Second, `"discoveryAuthorizationCacheSeconds":10`},
	} {
		t.Run(tc.cache.String(), func(t *testing.T) {
			f := newFixture(t)
			f.cfg.DiscoveryAuthorizationCache = tc.cache
			s, err := New(f.cfg)
			if err != nil {
				t.Fatal(err)
			}
			config, err := s.pluginConfig([]byte(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(config), tc.want) {
				t.Errorf("plugin configuration %s; want it to contain %s", config, tc.want)
			}
		})
	}
}

func TestSchemaSkewRoutingReachesThePluginConfiguration(t *testing.T) {
	for _, tc := range []struct {
		routing, want string
	}{
		{NewConfig().SchemaSkewRouting, `"schemaSkewRouting":"reads-and-writes"`},
		{"writes", `"schemaSkewRouting":"writes"`},
	} {
		f := newFixture(t)
		f.cfg.SchemaSkewRouting = tc.routing
		s, err := New(f.cfg)
		if err != nil {
			t.Fatal(err)
		}
		config, err := s.pluginConfig([]byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(config), tc.want) {
			t.Errorf("--schema-skew-routing %q: plugin configuration %s; want it to contain %s", tc.routing, config, tc.want)
		}
	}
}
