package kubecluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseKubebinFindsEveryRequestedBinary(t *testing.T) {
	out := "etcd v3.6.16 cache/etcd-v3.6.16\nkube-apiserver v1.35.4 cache/kube-apiserver-v1.35.4\nkube-apiserver v1.36.3 cache/kube-apiserver-v1.36.3\n"
	bins, err := parseKubebin([]byte(out), "v3.6.16", []string{"v1.35.4", "v1.36.3"})
	if err != nil {
		t.Fatal(err)
	}
	if bins.Etcd != "cache/etcd-v3.6.16" || bins.KubeAPIServer["v1.36.3"] != "cache/kube-apiserver-v1.36.3" || len(bins.KubeAPIServer) != 2 {
		t.Errorf("binaries %+v", bins)
	}
}

func TestParseKubebinRejectsIncompleteOrGarbledOutput(t *testing.T) {
	cases := []struct{ name, out string }{
		{"no etcd", "kube-apiserver v1.36.3 p\n"},
		{"etcd of another version", "etcd v3.5.0 p\nkube-apiserver v1.36.3 p\n"},
		{"missing server version", "etcd v3.6.16 p\nkube-apiserver v1.35.4 p\n"},
		{"garbled line", "etcd v3.6.16 p\nbuilding kube-apiserver...\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := parseKubebin([]byte(c.out), "v3.6.16", []string{"v1.36.3"}); err == nil {
				t.Errorf("parseKubebin(%q) succeeded; want an error", c.out)
			}
		})
	}
}

func TestServerArgsEnableTheMixedVersionProxyOnlyWhenAsked(t *testing.T) {
	c := &Cluster{PKI: &PKI{CA: "ca.crt", Tokens: "tokens.csv"}}
	plain := c.serverArgs(&Server{ServerSpec: ServerSpec{Name: "a", Version: "v1.35.4"}}, 6443, "http://127.0.0.1:2379")
	mvp := c.serverArgs(&Server{ServerSpec: ServerSpec{Name: "b", Version: "v1.36.3", MVP: true,
		RuntimeConfig: []string{"coordination.k8s.io/v1alpha2=true", "x/v1=true"}}}, 7443, "http://127.0.0.1:2379")
	for _, arg := range plain {
		if strings.HasPrefix(arg, "--peer-") || strings.HasPrefix(arg, "--feature-gates") || strings.HasPrefix(arg, "--runtime-config") {
			t.Errorf("server without MVP gets %s", arg)
		}
	}
	for _, want := range []string{
		"--secure-port=7443", "--peer-ca-file=ca.crt", "--peer-advertise-ip=127.0.0.1", "--peer-advertise-port=7443",
		"--feature-gates=APIServerIdentity=true,UnknownVersionInteroperabilityProxy=true",
		"--runtime-config=coordination.k8s.io/v1alpha2=true,x/v1=true", "--bind-address=127.0.0.1",
	} {
		if !slices.Contains(mvp, want) {
			t.Errorf("MVP server lacks %s: %v", want, mvp)
		}
	}
}

func TestProcessTailAndStop(t *testing.T) {
	dir := t.TempDir()
	p, err := StartProcess("printer", filepath.Join(dir, "log"), []string{"sh", "-c", `for i in 1 2 3 4 5; do echo line$i; done; exec sleep 60`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Tail(2), "line5") {
		if time.Now().After(deadline) {
			t.Fatalf("log never showed line5: %q", p.Tail(10))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := p.Tail(2); got != "line4\nline5" {
		t.Errorf("Tail(2) = %q; want the last two lines", got)
	}
	if exited, _ := p.Exited(); exited {
		t.Fatal("the process exited early")
	}
	p.Stop(5 * time.Second)
	if exited, err := p.Exited(); !exited || err == nil {
		t.Errorf("after Stop: exited %v, %v; want a process ended by SIGTERM", exited, err)
	}
	if _, err := os.Stat(p.LogPath); err != nil {
		t.Error(err)
	}
}

func TestFreePortsAreDistinct(t *testing.T) {
	ports, err := FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ports)
	if len(slices.Compact(ports)) != 5 || ports[0] <= 0 {
		t.Errorf("ports %v; want five distinct ports", ports)
	}
}
