package controller

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestParseServersNamesTheURLAndTheOptionThatGaveIt(t *testing.T) {
	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf("https://10.0.0.%d:6443", i+1)
	}
	for _, tc := range []struct {
		name   string
		static []string
		local  string
		url    string // "" for an error about no single URL
		isLoc  bool
		want   string
	}{
		{"plain http", []string{"http://10.0.0.1:6443"}, "", "http://10.0.0.1:6443", false, `API server "http://10.0.0.1:6443": must be an https:// URL`},
		{"bad local", nil, "https://10.0.0.1:6443/api", "https://10.0.0.1:6443/api", true,
			`local API server "https://10.0.0.1:6443/api": must be https://host:port with nothing after the port`},
		{"host name with an underscore", []string{"https://kube_a:6443"}, "", "https://kube_a:6443", false, `host "kube_a" is neither an IP address nor a DNS name`},
		{"host name with a trailing hyphen", []string{"https://kube-.example:6443"}, "", "https://kube-.example:6443", false, "neither an IP address nor a DNS name"},
		{"another port is another server", []string{"https://10.0.0.1:6443", "https://10.0.0.1"}, "", "", false, ""},
		{"listed twice after canonicalising", []string{"https://10.0.0.1:6443", "https://[::ffff:10.0.0.1]:6443"}, "", "https://[::ffff:10.0.0.1]:6443", false,
			`API server "https://[::ffff:10.0.0.1]:6443": listed twice (as 10.0.0.1:6443)`},
		{"cluster names clash", []string{"https://a-b.example:6443", "https://a.b-example:6443"}, "", "https://a.b-example:6443", false,
			"it and a-b.example:6443 both get the cluster name apiserver-a-b-example-6443"},
		{"too many", many, "", "", false, "65 API servers, at most 64 are supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addresses, _, err := ParseServers(tc.static, tc.local)
			if tc.want == "" {
				if err != nil || !slices.Equal(addresses, []string{"10.0.0.1:6443", "10.0.0.1:443"}) {
					t.Fatalf("= %q, %v; want two distinct servers (another port is another server)", addresses, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one containing %q", err, tc.want)
			}
			var bad *ServerURLError
			switch {
			case tc.url == "" && errors.As(err, &bad):
				t.Errorf("error about the set blames %q", bad.URL)
			case tc.url != "" && (!errors.As(err, &bad) || bad.URL != tc.url || bad.Local != tc.isLoc):
				t.Errorf("error %#v; want a ServerURLError for %q (local %v)", err, tc.url, tc.isLoc)
			}
		})
	}
}

func TestParseServersPutsTheLocalServerFirstOnce(t *testing.T) {
	addresses, local, err := ParseServers([]string{"https://10.0.0.2:6443", "https://10.0.0.1:6443"}, "https://10.0.0.1:6443/")
	if err != nil || local != "10.0.0.1:6443" || !slices.Equal(addresses, []string{"10.0.0.1:6443", "10.0.0.2:6443"}) {
		t.Errorf("= %q, %q, %v; want the local server first and once", addresses, local, err)
	}
}
