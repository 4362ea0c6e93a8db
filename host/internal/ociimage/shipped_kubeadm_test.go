package ociimage

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/yaml"
)

const kubeadmManifest = "../../deploy/kubeadm/skewgate.yaml"

// TestShippedKubeadmManifestPinsTheImageOfItsRevision rebuilds, in a clean
// checkout of the revision the kubeadm manifest records, what `make image`
// packs there, and requires the digest the manifest pins: the pinned image is
// reproducible by anyone from that commit with the same Go release. (The
// manifest cannot pin the image of the commit that holds it: the image carries
// its revision.)
func TestShippedKubeadmManifestPinsTheImageOfItsRevision(t *testing.T) {
	manifest, err := os.ReadFile(kubeadmManifest)
	if err != nil {
		t.Fatal(err)
	}
	var pod struct {
		Spec struct {
			Containers []struct {
				Image string `json:"image"`
			} `json:"containers"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(manifest, &pod); err != nil || len(pod.Spec.Containers) != 1 {
		t.Fatalf("%s: %v, %d containers", kubeadmManifest, err, len(pod.Spec.Containers))
	}
	pinned, err := name.NewDigest(pod.Spec.Containers[0].Image)
	if err != nil {
		t.Fatalf("%s: image %q is not a reference by digest: %v", kubeadmManifest, pod.Spec.Containers[0].Image, err)
	}
	revision, err := ManifestRevision(manifest)
	if err != nil {
		t.Fatalf("%s: %v", kubeadmManifest, err)
	}

	checkout := filepath.Join(t.TempDir(), "checkout")
	git := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	git("worktree", "add", "--detach", checkout, revision)
	t.Cleanup(func() { git("worktree", "remove", "--force", checkout) })
	// The tree's own Makefile, so that the build is the one `make image` ran there.
	build := exec.Command("make", "-C", checkout, "build")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build at %s: %v\n%s", revision, err, out)
	}
	binary, err := os.ReadFile(filepath.Join(checkout, "bin", "skewgate"))
	if err != nil {
		t.Fatal(err)
	}
	module, err := os.ReadFile(filepath.Join(checkout, "build", "skewgate.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := mustServerImage(t, binary, module, revision).Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d.String() != pinned.DigestStr() {
		t.Fatalf("%s pins %s, but revision %s builds to %s (a Go release other than the pinning one builds other bytes).\n"+
			"Run `make image` on a clean tree to pin the image of the current commit.", kubeadmManifest, pinned.DigestStr(), revision, d)
	}
	if _, err := SetManifestDigest(manifest, d); err != nil {
		t.Errorf("%s: `make image` could not update it: %v", kubeadmManifest, err)
	}
}
