package ociimage

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sirupsen/logrus"
)

// builtModule is the plugin as `make build` leaves it.
const builtModule = "../../../build/skewgate.wasm"

var readBuilt = sync.OnceValues(func() ([]byte, error) { return os.ReadFile(builtModule) })

func readBuiltModule(t *testing.T) []byte {
	t.Helper()
	module, err := readBuilt()
	if err != nil {
		t.Fatalf("the built plugin is missing (run `make build`): %v", err)
	}
	return module
}

// startRegistry serves the CNCF distribution registry with in-memory storage
// on a loopback port and returns its host:port.
func startRegistry(t *testing.T) string {
	t.Helper()
	// The registry logs every request, and a push's probes for blobs it does
	// not have yet as errors, through logrus's standard logger; a request
	// that really fails reaches the test as go-containerregistry's error,
	// which carries the registry's answer.
	logrus.SetLevel(logrus.FatalLevel)
	cfg := &configuration.Configuration{Storage: configuration.Storage{"inmemory": configuration.Parameters{}}}
	cfg.HTTP.Secret = "wasmoci-test"
	srv := httptest.NewServer(handlers.NewApp(context.Background(), cfg))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestPushedModulePullsBackByDigestUnchanged(t *testing.T) {
	ctx := t.Context()
	module := readBuiltModule(t)
	img := mustImage(t, module)
	want := mustDigest(t, img)

	host := startRegistry(t)
	pinned, err := Push(ctx, host+"/skewgate/skewgate-wasm:v0.1.0", img)
	if err != nil {
		t.Fatal(err)
	}
	if pinned.String() != host+"/skewgate/skewgate-wasm@"+want.String() {
		t.Fatalf("Push returned %s, want the repository pinned at %s", pinned, want)
	}

	// What the fetchers do first: resolve the reference to a descriptor.
	desc, err := remote.Get(pinned, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != want || desc.MediaType != types.OCIManifestSchema1 {
		t.Errorf("registry serves %s as %s, want %s", desc.Digest, desc.MediaType, types.OCIManifestSchema1)
	}
	pulled, err := desc.Image()
	if err != nil {
		t.Fatal(err)
	}
	if got := mustDigest(t, pulled); got != want {
		t.Errorf("pulled image has digest %s, pushed %s", got, want)
	}
	got, err := fetchedModule(pulled)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, module) {
		t.Errorf("pulled module is %d bytes and differs from the %d pushed", len(got), len(module))
	}

	tag, err := name.ParseReference(host + "/skewgate/skewgate-wasm:v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	if head, err := remote.Head(tag, remote.WithContext(ctx)); err != nil || head.Digest != want {
		t.Errorf("the tag resolves to %v (%v), want %s", head, err, want)
	}
}

func TestPushRefusesAReferencePinningAnotherDigest(t *testing.T) {
	host := startRegistry(t)
	other := mustDigest(t, mustImage(t, moduleWith("other")))
	_, err := Push(t.Context(), host+"/skewgate/skewgate-wasm@"+other.String(), mustImage(t, emptyModule))
	if err == nil || !strings.Contains(err.Error(), "pins "+other.String()) {
		t.Fatalf("error %v, want a refusal naming the pinned digest", err)
	}
	repo, err := name.NewRepository(host + "/skewgate/skewgate-wasm")
	if err != nil {
		t.Fatal(err)
	}
	if tags, err := remote.List(repo, remote.WithContext(t.Context())); err == nil && len(tags) > 0 {
		t.Errorf("the refused push left tags %v", tags)
	}
}
