package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/testcluster"
)

const (
	kubectlTimeout = 60 * time.Second
	// watchEventTimeout bounds the wait for one event on a running watch.
	watchEventTimeout = 30 * time.Second
	// healthChangeTimeout bounds the wait for the gateway to notice a server going or coming.
	healthChangeTimeout = time.Minute
)

// TestKubectlThroughSkewgate runs the real kubectl against skewgate, with a client-certificate
// kubeconfig (front-proxy identity) and with a token kubeconfig, on mutatingadmissionpolicies,
// which the 1.35 server of the skewed cluster does not serve: discovery, create, get, list and
// delete all succeed, and a watch keeps delivering events while the 1.35 server goes down and
// comes back, each change a new snapshot generation.
func TestKubectlThroughSkewgate(t *testing.T) {
	cluster := sharedSkewed.get(t)
	requireSkew(t, cluster)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	kubectlBinary := ensureKubectl(t)
	gw := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity})
	gw.waitSnapshot(t, "every server healthy in the gateway's snapshot", gatewayReadyTimeout, allHealthy(cluster))

	const resource = "mutatingadmissionpolicies"
	const qualified = resource + ".admissionregistration.k8s.io"
	for _, tc := range []struct {
		name string
		user kubeconfigUser
	}{
		{"client certificate", kubeconfigUser{ClientCertificate: gw.adminCertFile, ClientKey: gw.adminKeyFile}},
		{"token", kubeconfigUser{Token: cluster.PKI().AdminToken}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newKubectl(t, kubectlBinary, gw, tc.user)
			if got := k.run(t, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); got != testcluster.AdminUser {
				t.Fatalf("kubectl through skewgate is %q, want %s", got, testcluster.AdminUser)
			}
			resources := strings.Fields(k.run(t, "api-resources", "-o", "name"))
			for _, want := range []string{qualified, "leasecandidates.coordination.k8s.io", "namespaces"} {
				if !slices.Contains(resources, want) {
					t.Errorf("kubectl api-resources through skewgate lacks %s", want)
				}
			}

			watch := k.startWatch(t, resource)
			first, second := "skewgate-e2e-"+k.suffix+"-a", "skewgate-e2e-"+k.suffix+"-b"
			k.create(t, mutatingAdmissionPolicy(first))
			watch.expect(t, "ADDED", first)
			if got := k.run(t, "get", resource, first, "-o", "jsonpath={.metadata.name}"); got != first {
				t.Errorf("kubectl get %s %s printed %q", resource, first, got)
			}

			// Each health change of a server that cannot carry the watch is a new snapshot.
			old := cluster.Server(skewedOld)
			before, err := gw.snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if err := cluster.Stop(skewedOld); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ensureRunning(t, cluster, skewedOld) })
			down := gw.waitSnapshot(t, old.Name+" unhealthy in the snapshot", healthChangeTimeout, serverState(old, false))
			k.create(t, mutatingAdmissionPolicy(second))
			watch.expect(t, "ADDED", second)
			if err := cluster.Restart(ctx, skewedOld, ""); err != nil {
				t.Fatal(err)
			}
			up := gw.waitSnapshot(t, old.Name+" healthy again in the snapshot", healthChangeTimeout, serverState(old, true))
			if !(before.Generation < down.Generation && down.Generation < up.Generation) {
				t.Fatalf("snapshot generations %d, %d, %d around the restart do not increase", before.Generation, down.Generation, up.Generation)
			}

			listed := strings.Fields(k.run(t, "get", resource, "-o", "name"))
			for _, name := range []string{first, second} {
				if !slices.Contains(listed, "mutatingadmissionpolicy.admissionregistration.k8s.io/"+name) {
					t.Errorf("kubectl get %s lists %v, without %s", resource, listed, name)
				}
			}
			for _, name := range []string{first, second} {
				k.run(t, "delete", resource, name)
				watch.expect(t, "DELETED", name)
			}
			t.Logf("the watch delivered every event across snapshot generations %d to %d", before.Generation, up.Generation)
		})
	}
}

// ensureKubectl is the pinned kubectl, built on first use into the binary cache.
func ensureKubectl(t *testing.T) string {
	t.Helper()
	binary, err := testcluster.EnsureBinary(t.Context(), t, testcluster.Kubectl, testcluster.KubectlVersion)
	if err != nil {
		t.Fatalf("kubectl: %v", err)
	}
	return binary
}

// ensureRunning restarts server i of a shared cluster if a failed test left it stopped.
func ensureRunning(t *testing.T, cluster *testcluster.Cluster, i int) {
	if cluster.Server(i).Running {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), testcluster.DefaultStartTimeout)
	defer cancel()
	if err := cluster.Restart(ctx, i, ""); err != nil {
		t.Errorf("restarting %s for the scenarios that share the cluster: %v", cluster.Server(i).Name, err)
	}
}

// kubeconfigUser is how a kubeconfig authenticates.
type kubeconfigUser struct {
	ClientCertificate string `json:"client-certificate,omitempty"`
	ClientKey         string `json:"client-key,omitempty"`
	Token             string `json:"token,omitempty"`
}

// kubectl runs one kubectl binary with its own kubeconfig, cache and home directory.
type kubectl struct {
	binary, kubeconfig, cacheDir, home string
	// suffix makes object names unique per kubeconfig.
	suffix string
}

func newKubectl(t *testing.T, binary string, gw *skewgate, user kubeconfigUser) *kubectl {
	t.Helper()
	return newKubectlAt(t, binary, gw.URL, gw.servingCAFile, user)
}

// newKubectlAt is a kubectl for the server at serverURL, verified against caFile when set.
func newKubectlAt(t *testing.T, binary, serverURL, caFile string, user kubeconfigUser) *kubectl {
	t.Helper()
	dir := t.TempDir()
	server := map[string]string{"server": serverURL}
	if caFile != "" {
		server["certificate-authority"] = caFile
	}
	config := map[string]any{
		"apiVersion": "v1",
		"kind":       "Config",
		"clusters": []any{map[string]any{
			"name":    "skewgate",
			"cluster": server,
		}},
		"users": []any{map[string]any{"name": "admin", "user": user}},
		"contexts": []any{map[string]any{
			"name":    "skewgate",
			"context": map[string]string{"cluster": "skewgate", "user": "admin"},
		}},
		"current-context": "skewgate",
	}
	data, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	k := &kubectl{binary: binary, kubeconfig: filepath.Join(dir, "kubeconfig"), cacheDir: filepath.Join(dir, "cache"), home: dir, suffix: "token"}
	if user.ClientCertificate != "" {
		k.suffix = "cert"
	}
	writeFile(t, k.kubeconfig, data)
	return k
}

func (k *kubectl) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, k.binary, append([]string{"--kubeconfig=" + k.kubeconfig, "--cache-dir=" + k.cacheDir}, args...)...)
	// Nothing from the environment may point kubectl elsewhere.
	cmd.Env = []string{"HOME=" + k.home, "PATH=" + os.Getenv("PATH")}
	return cmd
}

// run runs kubectl to completion and returns its trimmed standard output.
func (k *kubectl) run(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	cmd := k.command(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	return strings.TrimSpace(stdout.String())
}

// try runs kubectl to completion and returns its combined output and error.
func (k *kubectl) try(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, kubectlTimeout)
	defer cancel()
	out, err := k.command(ctx, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (k *kubectl) create(t *testing.T, manifest []byte) {
	t.Helper()
	path := filepath.Join(k.home, fmt.Sprintf("object-%d.json", time.Now().UnixNano()))
	writeFile(t, path, manifest)
	k.run(t, "create", "-f", path)
}

// kubectlWatch is a running `kubectl get --watch` printing watch events as JSON.
type kubectlWatch struct {
	events chan watchEvent
	stderr *bytes.Buffer
	done   chan struct{}
	err    error // valid once done is closed
}

type watchEvent struct {
	Type   string `json:"type"`
	Object struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	} `json:"object"`
}

func (k *kubectl) startWatch(t *testing.T, resource string) *kubectlWatch {
	t.Helper()
	cmd := k.command(context.Background(), "get", resource, "--watch", "--output-watch-events", "-o", "json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w := &kubectlWatch{events: make(chan watchEvent, 64), stderr: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		defer close(w.events)
		dec := json.NewDecoder(stdout)
		for {
			var ev watchEvent
			if err := dec.Decode(&ev); err != nil {
				if !errors.Is(err, io.EOF) {
					w.err = err
				}
				w.err = errors.Join(w.err, cmd.Wait())
				return
			}
			w.events <- ev
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range w.events {
		}
		<-w.done
	})
	return w
}

// expect waits for an event of type about name, skipping others (such as the initial list and
// status updates); it fails if the watch ends first.
func (w *kubectlWatch) expect(t *testing.T, eventType, name string) {
	t.Helper()
	timeout := time.After(watchEventTimeout)
	for {
		select {
		case ev, open := <-w.events:
			if !open {
				<-w.done
				t.Fatalf("kubectl get --watch ended before %s %s: %v\nstderr: %s", eventType, name, w.err, w.stderr.String())
			}
			if ev.Type == eventType && ev.Object.Metadata.Name == name {
				return
			}
		case <-timeout:
			t.Fatalf("kubectl get --watch delivered no %s event for %s within %s", eventType, name, watchEventTimeout)
		}
	}
}

// mutatingAdmissionPolicy is a policy that matches nothing this test creates, and has no binding.
func mutatingAdmissionPolicy(name string) []byte {
	return []byte(`{
  "apiVersion": "admissionregistration.k8s.io/v1",
  "kind": "MutatingAdmissionPolicy",
  "metadata": {"name": "` + name + `"},
  "spec": {
    "matchConstraints": {
      "resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}]
    },
    "failurePolicy": "Fail",
    "reinvocationPolicy": "Never",
    "mutations": [{
      "patchType": "ApplyConfiguration",
      "applyConfiguration": {"expression": "Object{metadata: Object.metadata{labels: {\"skewgate-e2e\": \"true\"}}}"}
    }]
  }
}`)
}
