package kubenode

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ImageRepository is kubeadm's imageRepository and the repository of containerd's sandbox image on
// every node. The .invalid domain never resolves (RFC 6761), so an image that was not imported
// fails to pull on the machine itself instead of being fetched from anywhere.
const ImageRepository = "images.skewgate.invalid"

// imageBinDir is where an image holds its one binary; the image's PATH names it, so that the
// commands of kubeadm's static Pod manifests ("kube-apiserver", "etcd") resolve.
const imageBinDir = "/usr/local/bin"

// imageSpec is one image to build: its reference and the static binary it consists of.
type imageSpec struct {
	ref string
	// binary is the file to put into the image as imageBinDir/<command>.
	binary  string
	command string
}

// writeImages writes the images into one tarball in the format `docker save` writes and
// `ctr images import` reads. Each image is one layer on an empty image: the binary, and an empty
// /tmp, which Go programs write temporary files to.
func writeImages(file string, specs []imageSpec) error {
	images := map[name.Reference]v1.Image{}
	for _, s := range specs {
		ref, err := name.ParseReference(s.ref, name.StrictValidation)
		if err != nil {
			return err
		}
		img, err := binaryImage(s.binary, s.command)
		if err != nil {
			return fmt.Errorf("image %s: %w", s.ref, err)
		}
		images[ref] = img
	}
	return tarball.MultiRefWriteToFile(file, images)
}

func binaryImage(binary, command string) (v1.Image, error) {
	info, err := os.Stat(binary)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", binary)
	}
	open := func() (io.ReadCloser, error) {
		f, err := os.Open(binary)
		if err != nil {
			return nil, err
		}
		r, w := io.Pipe()
		go func() {
			err := writeBinaryLayer(w, f, info.Size(), command)
			f.Close()
			w.CloseWithError(err)
		}()
		return r, nil
	}
	// The layer stays on this machine: speed matters more than size.
	layer, err := tarball.LayerFromOpener(open, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	config, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	config = config.DeepCopy()
	config.OS = "linux"
	config.Architecture = runtime.GOARCH
	config.Config.Env = []string{"PATH=" + imageBinDir}
	config.Config.Entrypoint = []string{path.Join(imageBinDir, command)}
	return mutate.ConfigFile(img, config)
}

// writeBinaryLayer writes the layer's tar stream: the directories down to imageBinDir, the binary
// in it, and /tmp. Times are fixed, so that the same binary gives the same layer.
func writeBinaryLayer(w io.Writer, binary io.Reader, size int64, command string) error {
	tw := tar.NewWriter(w)
	epoch := time.Unix(0, 0)
	dir := ""
	for _, elem := range strings.Split(strings.Trim(imageBinDir, "/"), "/") {
		dir = path.Join(dir, elem)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: epoch}); err != nil {
		return err
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: path.Join(dir, command), Mode: 0o755, Size: size, ModTime: epoch}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, binary, size); err != nil {
		return err
	}
	return tw.Close()
}
