package rehearsal

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/host/testcluster/kubeadmskewgate"
)

// repoRoot is the module root, two levels above this package's directory (the working directory
// of its tests).
const repoRoot = "../.."

func upgradeKey(s Scenario) string { return s.From + "->" + s.To }

// skewgateDeployment builds skewgate as the Makefile builds bin/skewgate and prepares the
// deployment directory a user has after `make image`, with the plugin module of `make build`.
func skewgateDeployment(t *testing.T, ctx context.Context) Skewgate {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	wasm := filepath.Join(root, "build", "skewgate.wasm")
	if _, err := os.Stat(wasm); err != nil {
		t.Fatalf("the plugin module is missing (%v): run `make build` first", err)
	}
	work := t.TempDir()
	binary := filepath.Join(work, "skewgate")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", "grpcnotrace", "-o", binary, "./host/cmd/skewgate")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./host/cmd/skewgate: %v\n%s", err, out)
	}
	var out bytes.Buffer
	d, err := kubeadmskewgate.PrepareDeployment(ctx, filepath.Join(root, "host", "deploy", "kubeadm"), filepath.Join(work, "kubeadm"),
		binary, wasm, sourceRevision(t, root), &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("skewgate's image: %s\n%s", d.Digest, out.String())
	return Skewgate{Dir: d.Dir, Binary: binary, Wasm: wasm}
}

// sourceRevision is what `make image` labels the image with: the commit, "-dirty" for a modified
// tree.
func sourceRevision(t *testing.T, root string) string {
	t.Helper()
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	revision := strings.TrimSpace(string(head))
	status, err := exec.Command("git", "-C", root, "status", "--porcelain").Output()
	if err != nil {
		t.Fatal(err)
	}
	if len(bytes.TrimSpace(status)) > 0 {
		revision += "-dirty"
	}
	return revision
}

// rehearseThroughSkewgate runs s with skewgate as the endpoint and on every node, logs its counts,
// fails on any harm and returns its counts.
func rehearseThroughSkewgate(t *testing.T, s Scenario) Counts {
	ctx := rehearsalContext(t)
	sg := skewgateDeployment(t, ctx)
	s.Endpoint, s.NodeLocal = sg.Endpoint, sg.NodeLocal
	counts, err := Run(ctx, t, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("skewgate %s: %s", upgradeKey(s), counts)
	if counts.DependentsWronglyDeleted != 0 {
		t.Errorf("the garbage collector deleted %d of %d dependents whose owners exist", counts.DependentsWronglyDeleted, counts.DependentsCreated)
	}
	if counts.ObjectsLeftByNamespaceDeletion != 0 {
		t.Errorf("the namespace deletion left %d of its %d objects of the new kind behind", counts.ObjectsLeftByNamespaceDeletion, counts.ObjectsInDeletedNamespace)
	}
	if n := counts.failedTotal(); n != 0 {
		t.Errorf("%d of %d client requests failed: %v", n, counts.Requests, counts.Failed)
	}
	if counts.WatchInterruptions != 0 {
		t.Errorf("%d watches were interrupted", counts.WatchInterruptions)
	}
	if len(counts.PodsFailedToStart) != 0 {
		t.Errorf("pods failed to start: %v", counts.PodsFailedToStart)
	}
	return counts
}

func TestSnapshotViewNamesEachServersVersionHealthAndServiceLabels(t *testing.T) {
	raw := []byte(`{"generation":7,"servers":[` +
		`{"id":"a","cluster":"10.240.0.2_6443","version":"v1.31.4","healthy":true,"apis":{},"api":{},` +
		`"fieldSelectors":{"v1/services":["metadata.name","spec.clusterIP"],"v1/pods":["spec.nodeName"]}},` +
		`{"id":"b","cluster":"10.240.0.3_6443","version":"v1.30.14","healthy":false,"apis":{},"api":{}}]}`)
	want := "10.240.0.2_6443 v1.31.4 healthy services[metadata.name,spec.clusterIP]; 10.240.0.3_6443 v1.30.14 unhealthy"
	if got := snapshotView(raw); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := snapshotView([]byte("{")); !strings.HasPrefix(got, "unreadable: ") {
		t.Errorf("a broken snapshot reads %q, want it called unreadable", got)
	}
}
