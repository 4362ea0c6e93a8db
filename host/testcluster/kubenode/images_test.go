package kubenode

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/skewgate/skewgate/host/testcluster"
)

func TestWriteImagesPacksEachBinaryAsOneLayerUnderItsReference(t *testing.T) {
	dir := t.TempDir()
	binaries := map[string][]byte{"kube-apiserver": []byte("apiserver program"), "pause": []byte("pause program")}
	var specs []imageSpec
	for command, content := range binaries {
		file := filepath.Join(dir, command)
		if err := os.WriteFile(file, content, 0o755); err != nil {
			t.Fatal(err)
		}
		specs = append(specs, imageSpec{ref: ImageRepository + "/" + command + ":v1", binary: file, command: command})
	}
	archive := filepath.Join(dir, "images.tar")
	if err := writeImages(archive, specs); err != nil {
		t.Fatal(err)
	}
	for command, content := range binaries {
		tag, err := name.NewTag(ImageRepository + "/" + command + ":v1")
		if err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(archive, &tag)
		if err != nil {
			t.Fatalf("%s: %v", tag, err)
		}
		config, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if config.OS != "linux" || config.Architecture == "" {
			t.Errorf("%s: platform %s/%s, want linux and an architecture", tag, config.OS, config.Architecture)
		}
		if want := []string{"/usr/local/bin/" + command}; !slices.Equal(config.Config.Entrypoint, want) {
			t.Errorf("%s: entrypoint %q, want %q", tag, config.Config.Entrypoint, want)
		}
		if want := []string{"PATH=/usr/local/bin"}; !slices.Equal(config.Config.Env, want) {
			t.Errorf("%s: env %q, want %q", tag, config.Config.Env, want)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: %d layers (%v), want 1", tag, len(layers), err)
		}
		files := layerFiles(t, layers[0].Uncompressed)
		if got := files["usr/local/bin/"+command]; !bytes.Equal(got.content, content) || got.mode != 0o755 {
			t.Errorf("%s: binary %q mode %o, want %q mode 755", tag, got.content, got.mode, content)
		}
		if got, ok := files["tmp/"]; !ok || got.mode != 0o1777 {
			t.Errorf("%s: /tmp mode %o (present %v), want 1777", tag, got.mode, ok)
		}
	}
}

type layerFile struct {
	content []byte
	mode    int64
}

func layerFiles(t *testing.T, open func() (io.ReadCloser, error)) map[string]layerFile {
	t.Helper()
	rc, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]layerFile{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		content, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = layerFile{content: content, mode: hdr.Mode}
	}
}

func TestKubeadmImagesLeavesOutTheSkippedAddons(t *testing.T) {
	list := strings.Join([]string{
		ImageRepository + "/kube-apiserver:v1.36.3",
		ImageRepository + "/kube-controller-manager:v1.36.3",
		ImageRepository + "/kube-scheduler:v1.36.3",
		ImageRepository + "/kube-proxy:v1.36.3",
		ImageRepository + "/coredns:v1.13.1",
		ImageRepository + "/pause:3.10.1",
		ImageRepository + "/etcd:3.6.6-0",
	}, "\n") + "\n"
	got := kubeadmImages([]byte(list))
	want := []string{
		ImageRepository + "/kube-apiserver:v1.36.3",
		ImageRepository + "/kube-controller-manager:v1.36.3",
		ImageRepository + "/kube-scheduler:v1.36.3",
		ImageRepository + "/pause:3.10.1",
		ImageRepository + "/etcd:3.6.6-0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("kubeadmImages = %q, want %q", got, want)
	}
}

func TestImageForTakesTheBinaryOfTheImagesName(t *testing.T) {
	paths := map[testcluster.Binary]string{
		{Component: testcluster.KubeAPIServer, Version: "v1.36.3"}:         "/cache/kube-apiserver-v1.36.3",
		{Component: testcluster.Etcd, Version: testcluster.EtcdVersion}:    "/cache/etcd",
		{Component: testcluster.KubeScheduler, Version: "v1.36.3"}:         "/cache/kube-scheduler-v1.36.3",
		{Component: testcluster.KubeControllerManager, Version: "v1.36.3"}: "/cache/kcm-v1.36.3",
		{Component: testcluster.KubeControllerManager, Version: "v1.35.4"}: "/cache/kcm-v1.35.4",
	}
	for ref, want := range map[string]imageSpec{
		ImageRepository + "/kube-apiserver:v1.36.3":          {binary: "/cache/kube-apiserver-v1.36.3", command: "kube-apiserver"},
		ImageRepository + "/kube-controller-manager:v1.36.3": {binary: "/cache/kcm-v1.36.3", command: "kube-controller-manager"},
		ImageRepository + "/etcd:3.6.6-0":                    {binary: "/cache/etcd", command: "etcd"},
		ImageRepository + "/pause:3.10.1":                    {binary: "/build/pause", command: "pause"},
	} {
		got, err := imageFor(ref, "v1.36.3", "/build/pause", paths)
		want.ref = ref
		if err != nil || got != want {
			t.Errorf("imageFor(%s) = %+v, %v; want %+v", ref, got, err, want)
		}
	}
	for _, ref := range []string{ImageRepository + "/coredns:v1.13.1", "registry.example/kube-apiserver:v1.36.3"} {
		if _, err := imageFor(ref, "v1.36.3", "/build/pause", paths); err == nil {
			t.Errorf("imageFor(%s) succeeded", ref)
		}
	}
}
