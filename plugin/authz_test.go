package plugin

import (
	"testing"

	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/plugin/plugintest"
)

func TestAuthorizationCacheForgetsAnswersWhenTheyExpire(t *testing.T) {
	var c authorizationCache
	key := credentialKey{1}
	if _, ok := c.get(key, 0); ok {
		t.Fatal("empty cache answered")
	}
	c.put(authorization{key: key, expires: 100})
	for now, want := range map[int64]bool{0: true, 99: true, 100: false, 1000: false} {
		if _, ok := c.get(key, now); ok != want {
			t.Errorf("at %d: hit %v; want %v", now, ok, want)
		}
	}
}

func TestAuthorizationCacheKeepsTheLatestAnswerOfASlot(t *testing.T) {
	var c authorizationCache
	first, second := credentialKey{7}, credentialKey{7, 0x10}
	if slotOf(first) != slotOf(second) {
		t.Fatal("test keys must share a slot")
	}
	c.put(authorization{key: first, expires: 100})
	c.put(authorization{key: second, expires: 100, denial: &denial{status: 403}})
	if _, ok := c.get(first, 0); ok {
		t.Error("the replaced answer still hits")
	}
	if a, ok := c.get(second, 0); !ok || a.denial == nil || a.denial.status != 403 {
		t.Errorf("latest answer: %+v, hit %v; want the 403", a, ok)
	}
	if len(c.slots) != authorizationSlots {
		t.Errorf("%d slots; want the bound %d", len(c.slots), authorizationSlots)
	}
}

func TestCredentialKeyTellsEveryInputApart(t *testing.T) {
	key := func(path string, frontProxy bool, credentials ...[2]string) credentialKey {
		h := &httpContext{in: inbound{path: path}}
		return h.credentialKey(frontProxy, credentials)
	}
	base := key("/apis", false, [2]string{"authorization", "Bearer abc"})
	if key("/apis?timeout=32s", false, [2]string{"authorization", "Bearer abc"}) != base {
		t.Error("the query changed the key; authorization does not depend on it")
	}
	for name, other := range map[string]credentialKey{
		"path":            key("/api", false, [2]string{"authorization", "Bearer abc"}),
		"front-proxy":     key("/apis", true, [2]string{"authorization", "Bearer abc"}),
		"token":           key("/apis", false, [2]string{"authorization", "Bearer abd"}),
		"anonymous":       key("/apis", false),
		"impersonation":   key("/apis", false, [2]string{"authorization", "Bearer abc"}, [2]string{"impersonate-user", "bob"}),
		"shifted bytes":   key("/apis", false, [2]string{"authorizatio", "nBearer abc"}),
		"split value":     key("/apis", false, [2]string{"authorization", "Bearer "}, [2]string{"abc", ""}),
		"asserted groups": key("/apis", true, [2]string{"x-remote-user", "alice"}, [2]string{"x-remote-group", "dev"}),
	} {
		if other == base {
			t.Errorf("%s: same key as the base credential", name)
		}
	}
}

func TestDiscoveryAuthorizationCacheSecondsDefaultsToTen(t *testing.T) {
	for _, c := range []struct {
		options map[string]any
		want    int
	}{
		{nil, 10},
		{map[string]any{"discoveryAuthorizationCacheSeconds": 0}, 0},
		{map[string]any{"discoveryAuthorizationCacheSeconds": 300}, 300},
	} {
		cfg, err := parseConfig(plugintest.Config(t, 1, c.options, discoverytest.SkewedControlPlane()))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.DiscoveryAuthorizationCacheSeconds != c.want {
			t.Errorf("%v: %d; want %d", c.options, cfg.DiscoveryAuthorizationCacheSeconds, c.want)
		}
	}
}
