package testcluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// These tests run real etcd and kube-apiserver binaries. A binary missing from the cache is built
// first (minutes per binary; `go run ./host/testcluster/cmd/kubebin` pre-builds them), and
// a failed build fails the test.

func startTestCluster(t *testing.T, spec Spec) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c, err := Start(ctx, t, spec)
	if err != nil {
		t.Fatalf("starting cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("closing cluster: %v", err)
		}
	})
	return c
}

type versionInfo struct {
	GitVersion     string `json:"gitVersion"`
	Major          string `json:"major"`
	Minor          string `json:"minor"`
	EmulationMajor string `json:"emulationMajor"`
	EmulationMinor string `json:"emulationMinor"`
}

func getVersion(t *testing.T, client *http.Client, url string) versionInfo {
	t.Helper()
	resp, err := client.Get(url + "/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v versionInfo
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// whoAmI posts a SelfSubjectReview and returns the user name the server authenticated.
func whoAmI(t *testing.T, client *http.Client, url string, header http.Header) string {
	t.Helper()
	body := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	req, err := http.NewRequest(http.MethodPost, url+"/apis/authentication.k8s.io/v1/selfsubjectreviews", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for name, values := range header {
		req.Header[name] = values
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("SelfSubjectReview: HTTP %d: %s", resp.StatusCode, data)
	}
	var review struct {
		Status struct {
			UserInfo struct {
				Username string `json:"username"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(data, &review); err != nil {
		t.Fatal(err)
	}
	return review.Status.UserInfo.Username
}

func clientWith(c *Cluster, certs ...tls.Certificate) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:      c.CAPool(),
		ServerName:   ServingServerName,
		Certificates: certs,
	}}}
}

func TestClusterAuthenticatesEachCredentialAsItsOwnIdentity(t *testing.T) {
	c := startTestCluster(t, Spec{Servers: []ServerSpec{{Name: "auth-a", Version: KubeVersion136}}})
	url := c.Server(0).URL
	bearer := func(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }
	remoteAlice := http.Header{"X-Remote-User": {"alice"}, "X-Remote-Group": {"system:masters"}}
	for _, tc := range []struct {
		name   string
		client *http.Client
		header http.Header
		want   string
	}{
		{"admin certificate", clientWith(c, c.PKI().Admin), nil, AdminUser},
		{"admin token", clientWith(c), bearer(c.PKI().AdminToken), AdminUser},
		{"unprivileged token", clientWith(c), bearer(c.PKI().UserToken), UnprivilegedUser},
		{"front-proxy certificate asserting a user", clientWith(c, c.FrontProxyClientCertificate()), remoteAlice, "alice"},
		{"admin certificate cannot assert a user", clientWith(c, c.PKI().Admin), remoteAlice, AdminUser},
		{"token cannot assert a user", clientWith(c), func() http.Header {
			h := remoteAlice.Clone()
			h.Set("Authorization", "Bearer "+c.PKI().UserToken)
			return h
		}(), UnprivilegedUser},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := whoAmI(t, tc.client, url, tc.header); got != tc.want {
				t.Errorf("authenticated as %q, want %q", got, tc.want)
			}
		})
	}

	t.Run("admin rest.Config", func(t *testing.T) {
		client, err := rest.HTTPClientFor(c.AdminRESTConfig(0))
		if err != nil {
			t.Fatal(err)
		}
		if got := whoAmI(t, client, url, nil); got != AdminUser {
			t.Errorf("authenticated as %q, want %q", got, AdminUser)
		}
	})

	t.Run("kubeconfigs", func(t *testing.T) {
		for path, wantToken := range map[string]bool{c.AdminKubeconfig(): false, c.AdminTokenKubeconfig(): true} {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var cfg kubeconfigFile
			if err := json.Unmarshal(data, &cfg); err != nil {
				t.Fatal(err)
			}
			if len(cfg.Clusters) != 1 || cfg.Clusters[0].Cluster.Server != url || cfg.CurrentContext != "auth-a" {
				t.Errorf("%s: clusters %+v, current context %q", path, cfg.Clusters, cfg.CurrentContext)
			}
			if hasToken := cfg.Users[0].User.Token == c.PKI().AdminToken; hasToken != wantToken {
				t.Errorf("%s: user %+v, want token=%v", path, cfg.Users[0].User, wantToken)
			}
		}
	})
}

func TestClusterRestartUpgradesAServerInPlace(t *testing.T) {
	c := startTestCluster(t, Spec{Servers: []ServerSpec{{Name: "upgrade-a", Version: KubeVersion135, MVP: true}}})
	before := c.Server(0)
	if before.ServerID != ServerID("upgrade-a") || !strings.HasPrefix(before.HolderIdentity, before.ServerID+"_") {
		t.Fatalf("server %+v does not carry the identity derived from its host name", before)
	}
	client := clientWith(c, c.PKI().Admin)
	if got := getVersion(t, client, before.URL); got != (versionInfo{"v1.35.4", "1", "35", "1", "35"}) {
		t.Errorf("/version before the upgrade = %+v", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := c.Restart(ctx, 0, KubeVersion136); err != nil {
		t.Fatal(err)
	}
	after := c.Server(0)
	if after.URL != before.URL || after.ServerID != before.ServerID || after.Version != KubeVersion136 {
		t.Errorf("after the upgrade %+v, before %+v", after, before)
	}
	if after.HolderIdentity == before.HolderIdentity {
		t.Errorf("identity lease holder %q did not change across the restart", after.HolderIdentity)
	}
	client.CloseIdleConnections()
	if got := getVersion(t, client, after.URL); got != (versionInfo{"v1.36.3", "1", "36", "1", "36"}) {
		t.Errorf("/version after the upgrade = %+v", got)
	}

	proc, dir := c.servers[0].proc, c.Dir()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if done, _ := proc.Exited(); !done {
		t.Error("kube-apiserver still running after Close")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster directory %s survived Close: %v", dir, err)
	}
}
