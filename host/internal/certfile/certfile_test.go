package certfile

import (
	"bytes"
	"context"
	"crypto/x509"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/devpki"
	"github.com/skewgate/skewgate/host/internal/metricstest"
)

// newWatcher is a watcher whose log the test reads; the tests call check
// themselves, so it logs on the test's goroutine.
func newWatcher(t *testing.T) (*Watcher, *bytes.Buffer) {
	t.Helper()
	logs := &bytes.Buffer{}
	return NewWatcher(slog.New(slog.NewTextHandler(logs, nil)), time.Hour), logs
}

// exposition is the watcher's metrics in the text format, as /metrics serves
// them.
func exposition(t *testing.T, w *Watcher) string {
	t.Helper()
	text, err := metricstest.Exposition(w)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// pair is a certificate and key in PEM form.
type pair struct{ cert, key []byte }

func newPair(t *testing.T, ca *devpki.CA, name string) pair {
	t.Helper()
	leaf, err := ca.Serving(name, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	key, err := leaf.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	return pair{leaf.CertPEM(), key}
}

func newCA(t *testing.T, name string) *devpki.CA {
	t.Helper()
	ca, err := devpki.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func write(t *testing.T, path string, content []byte) {
	t.Helper()
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
}

// writePair writes p as certFile and keyFile, the certificate first.
func writePair(t *testing.T, certFile, keyFile string, p pair) {
	t.Helper()
	write(t, certFile, p.cert)
	write(t, keyFile, p.key)
}

// secretVolume lays files out as a Kubernetes Secret volume does: each name
// is a symlink into ..data, itself a symlink to a timestamped directory that
// an update replaces by switching ..data atomically.
type secretVolume struct {
	t       *testing.T
	dir     string
	version int
}

func newSecretVolume(t *testing.T, files map[string][]byte) *secretVolume {
	v := &secretVolume{t: t, dir: t.TempDir()}
	v.update(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func (v *secretVolume) update(files map[string][]byte) {
	v.version++
	data := filepath.Join(v.dir, "..2026_01_01_00_00_0"+string(rune('0'+v.version)))
	if err := os.Mkdir(data, 0o755); err != nil {
		v.t.Fatal(err)
	}
	for name, content := range files {
		write(v.t, filepath.Join(data, name), content)
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(data), tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
}

func (v *secretVolume) path(name string) string { return filepath.Join(v.dir, name) }

func TestKeyPairFollowsItsFilesHoweverTheyAreReplaced(t *testing.T) {
	ca := newCA(t, "ca")
	first, second := newPair(t, ca, "first"), newPair(t, ca, "second")
	for _, tc := range []struct {
		name string
		// setup writes first and returns the paths and how to replace them
		// with second.
		setup func(t *testing.T) (certFile, keyFile string, replace func())
	}{
		{"written in place", func(t *testing.T) (string, string, func()) {
			dir := t.TempDir()
			c, k := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
			writePair(t, c, k, first)
			return c, k, func() { writePair(t, c, k, second) }
		}},
		{"renamed over", func(t *testing.T) (string, string, func()) {
			dir := t.TempDir()
			c, k := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
			writePair(t, c, k, first)
			return c, k, func() {
				writePair(t, c+".new", k+".new", second)
				if err := os.Rename(c+".new", c); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(k+".new", k); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"a Secret volume's ..data symlink switched", func(t *testing.T) (string, string, func()) {
			v := newSecretVolume(t, map[string][]byte{"tls.crt": first.cert, "tls.key": first.key})
			return v.path("tls.crt"), v.path("tls.key"), func() {
				v.update(map[string][]byte{"tls.crt": second.cert, "tls.key": second.key})
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, logs := newWatcher(t)
			certFile, keyFile, replace := tc.setup(t)
			kp, err := w.KeyPair("--tls-cert-file/--tls-private-key-file", certFile, keyFile)
			if err != nil {
				t.Fatal(err)
			}
			changes := 0
			kp.OnChange(func() { changes++ })
			w.check()
			if cn := kp.Certificate().Leaf.Subject.CommonName; cn != "first" || changes != 0 {
				t.Fatalf("before the replacement: %s after %d changes", cn, changes)
			}
			replace()
			w.check()
			w.check()
			if cn := kp.Certificate().Leaf.Subject.CommonName; cn != "second" || changes != 1 {
				t.Errorf("after the replacement: %s after %d changes, want second after 1", cn, changes)
			}
			if strings.Contains(logs.String(), "level=ERROR") {
				t.Errorf("errors logged:\n%s", logs)
			}
		})
	}
}

func TestBadNewContentIsRejectedNamingTheFlagAndTheMaterialInUseStays(t *testing.T) {
	ca := newCA(t, "ca")
	good, other := newPair(t, ca, "good"), newPair(t, ca, "other")
	for _, tc := range []struct {
		name      string
		cert, key []byte // nil: remove the file
	}{
		{"key of another certificate", other.cert, good.key},
		{"not PEM", []byte("not a certificate"), good.key},
		{"empty certificate", []byte{}, good.key},
		{"truncated key", good.cert, good.key[:len(good.key)/2]},
		{"missing key", good.cert, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, logs := newWatcher(t)
			dir := t.TempDir()
			certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
			writePair(t, certFile, keyFile, good)
			const flags = "--proxy-client-cert-file/--proxy-client-key-file"
			kp, err := w.KeyPair(flags, certFile, keyFile)
			if err != nil {
				t.Fatal(err)
			}
			changes := 0
			kp.OnChange(func() { changes++ })
			write(t, certFile, tc.cert)
			if tc.key == nil {
				os.Remove(keyFile)
			} else {
				write(t, keyFile, tc.key)
			}
			for range 3 {
				w.check()
			}
			if cn := kp.Certificate().Leaf.Subject.CommonName; cn != "good" || changes != 0 {
				t.Errorf("in use: %s after %d changes, want the good certificate unchanged", cn, changes)
			}
			if got := strings.Count(logs.String(), "level=ERROR"); got != 1 || !strings.Contains(logs.String(), flags) {
				t.Errorf("want one error naming %s, got:\n%s", flags, logs)
			}
			metrics := exposition(t, w)
			if want := `skewgate_certificate_reload_failures_total{files="` + flags + `"} 1`; !strings.Contains(metrics, want) {
				t.Errorf("metrics lack %s:\n%s", want, metrics)
			}

			// A good replacement is taken after all.
			writePair(t, certFile, keyFile, other)
			w.check()
			if cn := kp.Certificate().Leaf.Subject.CommonName; cn != "other" || changes != 1 {
				t.Errorf("after a good replacement: %s after %d changes", cn, changes)
			}
		})
	}
}

func TestPairReplacedOneFileAtATimeIsNotReported(t *testing.T) {
	ca := newCA(t, "ca")
	first, second := newPair(t, ca, "first"), newPair(t, ca, "second")
	w, logs := newWatcher(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writePair(t, certFile, keyFile, first)
	kp, err := w.KeyPair("--tls-cert-file/--tls-private-key-file", certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	write(t, certFile, second.cert)
	w.check()
	write(t, keyFile, second.key)
	w.check()
	if cn := kp.Certificate().Leaf.Subject.CommonName; cn != "second" {
		t.Errorf("in use: %s, want second", cn)
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("a replacement in two writes was reported:\n%s", logs)
	}
}

// verifies reports whether pool verifies a certificate ca issued.
func verifies(t *testing.T, pool *x509.CertPool, ca *devpki.CA) bool {
	t.Helper()
	leaf, err := ca.Serving("leaf", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = leaf.Cert.Verify(x509.VerifyOptions{Roots: pool})
	return err == nil
}

func TestCABundleFollowsItsFileAndRefusesATruncatedOne(t *testing.T) {
	oldCA, newCA_ := newCA(t, "old"), newCA(t, "new")
	both := append(append([]byte{}, oldCA.CertPEM()...), newCA_.CertPEM()...)
	v := newSecretVolume(t, map[string][]byte{"ca.crt": oldCA.CertPEM()})
	w, logs := newWatcher(t)
	const flag = "--peer-ca-file"
	b, err := w.CABundle(flag, v.path("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	changes := 0
	b.OnChange(func() { changes++ })

	v.update(map[string][]byte{"ca.crt": both})
	w.check()
	if !verifies(t, b.Pool(), oldCA) || !verifies(t, b.Pool(), newCA_) || !bytes.Equal(b.PEM(), both) || changes != 1 {
		t.Fatalf("the bundle of both CAs is not in use (%d changes)", changes)
	}

	// The bundle cut in the middle of its second certificate still holds
	// the first: it must not be taken for a bundle of the first alone.
	v.update(map[string][]byte{"ca.crt": both[:len(both)-100]})
	w.check()
	w.check()
	if !verifies(t, b.Pool(), newCA_) || changes != 1 {
		t.Errorf("a truncated bundle replaced the one in use")
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), flag) {
		t.Errorf("want an error naming %s:\n%s", flag, logs)
	}

	v.update(map[string][]byte{"ca.crt": newCA_.CertPEM()})
	w.check()
	if verifies(t, b.Pool(), oldCA) || !verifies(t, b.Pool(), newCA_) || changes != 2 {
		t.Errorf("the new CA alone is not in use (%d changes)", changes)
	}
}

func TestLoadingNamesTheFlag(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	write(t, notPEM, []byte("not a certificate"))
	w, _ := newWatcher(t)
	if _, err := w.CABundle("--client-ca-file", filepath.Join(dir, "absent.crt")); err == nil || !strings.HasPrefix(err.Error(), "--client-ca-file: ") {
		t.Errorf("missing CA file: %v", err)
	}
	if _, err := w.CABundle("--client-ca-file", notPEM); err == nil || !strings.Contains(err.Error(), "--client-ca-file: no PEM certificate") {
		t.Errorf("CA file without certificates: %v", err)
	}
	if _, err := w.KeyPair("--tls-cert-file/--tls-private-key-file", notPEM, notPEM); err == nil || !strings.HasPrefix(err.Error(), "--tls-cert-file/--tls-private-key-file: ") {
		t.Errorf("bad key pair: %v", err)
	}
}

func TestRunReadsTheFilesEveryInterval(t *testing.T) {
	oldCA, newCA_ := newCA(t, "old"), newCA(t, "new")
	path := filepath.Join(t.TempDir(), "ca.crt")
	write(t, path, oldCA.CertPEM())
	w := NewWatcher(slog.New(slog.DiscardHandler), 10*time.Millisecond)
	b, err := w.CABundle("--peer-ca-file", path)
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 1)
	b.OnChange(func() { changed <- struct{}{} })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	write(t, path, newCA_.CertPEM())
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("the change was not noticed")
	}
	if !verifies(t, b.Pool(), newCA_) {
		t.Error("the new CA is not in use")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if err := w.Run(context.Background()); err == nil {
		t.Error("a second Run was accepted")
	}
}
