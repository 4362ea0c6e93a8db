package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// kubernetesGoModExcerpt has the shape of k8s.io/kubernetes' go.mod: a godebug line, require
// blocks and a replace block pointing the staging modules at local directories.
const kubernetesGoModExcerpt = `// This is a generated file. Do not edit directly.

module k8s.io/kubernetes

go 1.25.0

godebug default=go1.25

require (
	github.com/spf13/cobra v1.10.0
	k8s.io/api v0.0.0
	k8s.io/apiserver v0.0.0
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/apiserver => ./staging/src/k8s.io/apiserver // comments are ignored
	k8s.io/client-go v0.0.0 => ./staging/src/k8s.io/client-go
	github.com/example/fork => github.com/example/fork v1.2.3
)

replace k8s.io/kubectl => ../kubectl
`

func TestParseGoModCollectsGoVersionGodebugAndLocalReplacementsOnly(t *testing.T) {
	got, err := parseGoMod([]byte(kubernetesGoModExcerpt))
	if err != nil {
		t.Fatal(err)
	}
	if got.goVersion != "1.25.0" {
		t.Errorf("go version = %q, want 1.25.0", got.goVersion)
	}
	if want := []string{"default=go1.25"}; !slices.Equal(got.godebug, want) {
		t.Errorf("godebug = %q, want %q", got.godebug, want)
	}
	want := []string{"k8s.io/api", "k8s.io/apiserver", "k8s.io/client-go", "k8s.io/kubectl"}
	if !slices.Equal(got.localReplacements, want) {
		t.Errorf("local replacements = %q, want %q", got.localReplacements, want)
	}
}

func TestParseGoModRejectsMalformedFiles(t *testing.T) {
	for _, tc := range []struct {
		name, goMod string
	}{
		{"no go directive", "module m\n"},
		{"unterminated block", "module m\ngo 1.25\nreplace (\n\ta => ./a\n"},
		{"replace without target", "module m\ngo 1.25\nreplace a =>\n"},
		{"replace without arrow", "module m\ngo 1.25\nreplace a ./a\n"},
		{"godebug without value", "module m\ngo 1.25\ngodebug default\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parseGoMod([]byte(tc.goMod)); err == nil {
				t.Errorf("parseGoMod(%q) succeeded", tc.goMod)
			}
		})
	}
}

func TestRenderBuilderGoModReplacesEveryStagingModuleWithItsPublishedRelease(t *testing.T) {
	upstream, err := parseGoMod([]byte(kubernetesGoModExcerpt))
	if err != nil {
		t.Fatal(err)
	}
	got, err := renderBuilderGoMod("example.invalid/builder", kubernetesModule, "v1.36.3", upstream)
	if err != nil {
		t.Fatal(err)
	}
	want := `module example.invalid/builder

go 1.25.0

godebug (
	default=go1.25
)

require k8s.io/kubernetes v1.36.3

replace (
	k8s.io/api => k8s.io/api v0.36.3
	k8s.io/apiserver => k8s.io/apiserver v0.36.3
	k8s.io/client-go => k8s.io/client-go v0.36.3
	k8s.io/kubectl => k8s.io/kubectl v0.36.3
)
`
	if string(got) != want {
		t.Errorf("builder go.mod:\n%s\nwant:\n%s", got, want)
	}
}

func TestRenderBuilderGoModOfEtcdOnlyRequiresTheModule(t *testing.T) {
	upstream := goModFile{goVersion: "1.26.0", localReplacements: []string{"go.etcd.io/etcd/api/v3"}}
	got, err := renderBuilderGoMod("example.invalid/builder", etcdModule, EtcdVersion, upstream)
	if err != nil {
		t.Fatal(err)
	}
	want := "module example.invalid/builder\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 v3.6.16\n"
	if string(got) != want {
		t.Errorf("builder go.mod:\n%s\nwant:\n%s", got, want)
	}
}

func TestRenderBuilderGoModRefusesKubernetesWithoutStagingReplacements(t *testing.T) {
	if _, err := renderBuilderGoMod("m", kubernetesModule, KubeVersion135, goModFile{goVersion: "1.25.0"}); err == nil {
		t.Error("rendering succeeded without staging replacements")
	}
}

func TestKubeVersionLDFlagsStampBothVersionPackages(t *testing.T) {
	got, err := kubeVersionLDFlags("v1.35.4", time.Date(2026, 4, 15, 18, 1, 22, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		for _, kv := range []string{"gitVersion=v1.35.4", "gitMajor=1", "gitMinor=35", "gitTreeState=clean", "gitCommit=", "buildDate=2026-04-15T18:01:22Z"} {
			if want := "-X " + pkg + "." + kv; !strings.Contains(got+" ", want+" ") {
				t.Errorf("ldflags %q lack %q", got, want)
			}
		}
	}
}

func TestVersionLDFlagsStampWhereTheReleaseBuildDoes(t *testing.T) {
	released := time.Date(2026, 4, 15, 18, 1, 22, 0, time.UTC)
	for _, tc := range []struct {
		module  *moduleRecipe
		version string
		want    string
	}{
		{etcdModule, EtcdVersion, "-s -w"},
		{containerdModule, ContainerdVersion, "-s -w -X github.com/containerd/containerd/v2/version.Version=v2.2.9"},
		{criToolsModule, CrictlVersion, "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=v1.37.0"},
	} {
		got, err := versionLDFlags(tc.module, tc.version, released)
		if err != nil || got != tc.want {
			t.Errorf("versionLDFlags(%s, %s) = %q, %v; want %q", tc.module.path, tc.version, got, err, tc.want)
		}
	}
	got, err := versionLDFlags(kubernetesModule, KubeVersion136, released)
	if err != nil || !strings.Contains(got, "-X k8s.io/component-base/version.gitVersion=v1.36.3") {
		t.Errorf("versionLDFlags(kubernetes) = %q, %v; want the Kubernetes version stamps", got, err)
	}
}

func TestExecutableNameIsTheLastNonMajorVersionElement(t *testing.T) {
	for pkg, want := range map[string]string{
		"k8s.io/kubernetes/cmd/kubelet":                                   "kubelet",
		"go.etcd.io/etcd/server/v3":                                       "server",
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2": "containerd-shim-runc-v2",
		"sigs.k8s.io/cri-tools/cmd/crictl":                                "crictl",
		"example.com/tool/v1":                                             "v1",
	} {
		if got := executableName(pkg); got != want {
			t.Errorf("executableName(%q) = %q, want %q", pkg, got, want)
		}
	}
}

func TestGroupByModuleVersionBuildsEachReleaseInOneInvocation(t *testing.T) {
	bins := []Binary{
		{KubeAPIServer, KubeVersion136},
		{Etcd, EtcdVersion},
		{KubeletComponent, KubeVersion136},
		{KubeAPIServer, KubeVersion135},
		{Containerd, ContainerdVersion},
		{Kubeadm, KubeVersion136},
		{ContainerdShim, ContainerdVersion},
		{Crictl, CrictlVersion},
	}
	recipes := map[Binary]recipe{}
	for _, b := range bins {
		r, err := recipeFor(b.Component)
		if err != nil {
			t.Fatal(err)
		}
		recipes[b] = r
	}
	var got []string
	for _, g := range groupByModuleVersion(bins, recipes) {
		var names []string
		for _, b := range g {
			names = append(names, b.String())
		}
		got = append(got, strings.Join(names, " "))
	}
	want := []string{
		"kube-apiserver@v1.36.3 kubelet@v1.36.3 kubeadm@v1.36.3",
		"etcd@v3.6.16",
		"kube-apiserver@v1.35.4",
		"containerd@v2.2.9 containerd-shim-runc-v2@v2.2.9",
		"crictl@v1.37.0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("groups:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseReleaseVersionAcceptsOnlyPlainReleases(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    releaseVersion
		staging string
		ok      bool
	}{
		{"v1.35.4", releaseVersion{1, 35, 4}, "v0.35.4", true},
		{"v1.37.12", releaseVersion{1, 37, 12}, "v0.37.12", true},
		{"1.35.4", releaseVersion{}, "", false},
		{"v1.35", releaseVersion{}, "", false},
		{"v1.36.0-rc.1", releaseVersion{}, "", false},
		{"", releaseVersion{}, "", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseReleaseVersion(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("parseReleaseVersion(%q) error = %v, want ok=%v", tc.in, err, tc.ok)
			}
			if !tc.ok {
				return
			}
			if got != tc.want || stagingVersion(got) != tc.staging {
				t.Errorf("parseReleaseVersion(%q) = %+v (staging %s), want %+v (staging %s)", tc.in, got, stagingVersion(got), tc.want, tc.staging)
			}
		})
	}
}

// writeScript writes an executable shell script standing in for a cached binary.
func writeScript(t *testing.T, path, body string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), mode); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyBinaryTrustsOnlyACopyReportingTheExpectedVersion(t *testing.T) {
	r, err := recipeFor(KubeAPIServer)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		script string
		mode   os.FileMode
		ok     bool
	}{
		{"reports the version", `[ "$1" = --version ] && echo "Kubernetes v1.36.3"`, 0o755, true},
		{"reports another version", `echo "Kubernetes v1.36.2"`, 0o755, false},
		{"reports an unstamped version", `echo "Kubernetes v0.0.0-master+\$Format:%H\$"`, 0o755, false},
		{"fails", `echo "Kubernetes v1.36.3"; exit 1`, 0o755, false},
		{"not executable", `echo "Kubernetes v1.36.3"`, 0o644, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			writeScript(t, path, tc.script, tc.mode)
			err := verifyBinary(context.Background(), path, r, "v1.36.3")
			if (err == nil) != tc.ok {
				t.Errorf("verifyBinary = %v, want ok=%v", err, tc.ok)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		err := verifyBinary(context.Background(), filepath.Join(dir, "absent"), r, "v1.36.3")
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("verifyBinary of a missing file = %v, want ErrNotExist", err)
		}
	})
}

func TestEveryRecipeRecognisesTheVersionOutputOfItsRelease(t *testing.T) {
	dir := t.TempDir()
	// What the release builds print, as captured from them; each stand-in checks the arguments.
	for _, tc := range []struct {
		component Component
		version   string
		args      string
		output    string
	}{
		{KubeAPIServer, "v1.36.3", "--version", "Kubernetes v1.36.3"},
		{KubeScheduler, "v1.36.3", "--version", "Kubernetes v1.36.3"},
		{KubeletComponent, "v1.36.3", "--version", "Kubernetes v1.36.3"},
		{Kubeadm, "v1.36.3", "version -o short", "v1.36.3"},
		{Kubectl, "v1.36.3", "version --client", "Client Version: v1.36.3\nKustomize Version: v5.8.1"},
		{Etcd, "v3.6.16", "--version", "etcd Version: 3.6.16\nGit SHA: GitNotFound"},
		{Containerd, "v2.2.9", "--version", "containerd github.com/containerd/containerd/v2 v2.2.9 "},
		{Ctr, "v2.2.9", "--version", "ctr github.com/containerd/containerd/v2 v2.2.9"},
		{ContainerdShim, "v2.2.9", "-v", "containerd-shim-runc-v2:\n  Version:  v2.2.9\n  Revision: \n  Go version: go1.26.8\n"},
		{Crictl, "v1.37.0", "--version", "crictl version v1.37.0"},
	} {
		t.Run(string(tc.component), func(t *testing.T) {
			r, err := recipeFor(tc.component)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, string(tc.component))
			writeScript(t, path, fmt.Sprintf(`[ "$*" = %q ] || exit 2; printf '%%b\n' %q`, tc.args, tc.output), 0o755)
			if err := verifyBinary(context.Background(), path, r, tc.version); err != nil {
				t.Errorf("the release's own output: %v", err)
			}
			if err := verifyBinary(context.Background(), path, r, "v9.9.9"); err == nil {
				t.Error("accepted as another version")
			}
		})
	}
}

type discardLogger struct{}

func (discardLogger) Logf(string, ...any) {}

func TestEnsureBinaryReusesAVerifiedCopyKeyedByComponentAndVersion(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	cached := filepath.Join(dir, "etcd-"+EtcdVersion)
	writeScript(t, cached, `echo "etcd Version: 3.6.16"`, 0o755)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := EnsureBinary(ctx, discardLogger{}, Etcd, EtcdVersion)
	if err != nil {
		t.Fatal(err)
	}
	if got != cached {
		t.Errorf("EnsureBinary = %s, want the cached %s", got, cached)
	}
}

func TestEnsureBinaryRejectsUnknownComponentsAndVersions(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	for _, tc := range []struct {
		component Component
		version   string
	}{
		{"kube-proxy", KubeVersion136},
		{KubeAPIServer, "1.36.3"},
		{Etcd, "latest"},
	} {
		t.Run(string(tc.component)+"@"+tc.version, func(t *testing.T) {
			if _, err := EnsureBinary(context.Background(), discardLogger{}, tc.component, tc.version); err == nil {
				t.Error("EnsureBinary succeeded")
			}
		})
	}
}
