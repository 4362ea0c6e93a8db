package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/testcluster"
)

// certificateReloadTimeout bounds how long the gateway may take to notice a changed certificate
// file (kube-apiserver's dynamic certificates notice within a minute).
const certificateReloadTimeout = 90 * time.Second

// rotatedProxyClientName is the common name of a front-proxy client certificate the servers do
// not accept identities from: on the one-CA cluster they authenticate it as a user of its own,
// so a SelfSubjectReview of an asserted request shows which certificate the gateway presented.
const rotatedProxyClientName = "skewgate-e2e-rotated-proxy-client"

// TestCertificateRotationKeepsWatchesAndRejectsBadFiles replaces the gateway's serving
// certificate and its front-proxy client certificate files while a watch runs through it: new
// connections get the new serving certificate and asserted requests carry the new front-proxy
// certificate, the watch keeps delivering events, and a file that holds no certificate is
// rejected, the gateway going on with the material it had.
func TestCertificateRotationKeepsWatchesAndRejectsBadFiles(t *testing.T) {
	cluster := sharedOneCA.get(t)
	gw := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity})
	gw.waitSnapshot(t, "every server healthy in the gateway's snapshot", gatewayReadyTimeout, allHealthy(cluster))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watchClient := gw.adminClient()
	watchClient.Timeout = 0 // the watch streams; the context ends it
	defer watchClient.CloseIdleConnections()
	watch := openWatchStream(ctx, t, watchClient, gw.URL+"/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=900")
	objects := newClusterObjects(cluster)
	events := 0
	requireWatchRunning := func(t *testing.T) {
		t.Helper()
		events++
		name := "skewgate-e2e-rotation-" + strconv.Itoa(events)
		objects.createConfigMap(t, "default", name)
		if err := watch.expect("ADDED", name, watchEventTimeout); err != nil {
			t.Fatalf("the watch opened before the rotation: %v", err)
		}
	}

	t.Run("serving certificate", func(t *testing.T) {
		first, err := servedCertificate(gw)
		if err != nil {
			t.Fatal(err)
		}
		next, err := gw.ca.Serving("skewgate-rotated", "127.0.0.1", "localhost")
		if err != nil {
			t.Fatal(err)
		}
		replaceCertificate(t, gw.servingCertFile, gw.servingKeyFile, next.TLSCertificate())
		eventually(t, "new connections get the new serving certificate", certificateReloadTimeout, 200*time.Millisecond, func() error {
			got, err := servedCertificate(gw)
			if err != nil {
				return err
			}
			if !got.Equal(next.Cert) {
				return fmt.Errorf("serving serial %s (the first was %s)", got.SerialNumber, first.SerialNumber)
			}
			return nil
		})
		requireWatchRunning(t)

		gw.rejectsBadFile(t, gw.servingCertFile, "tls-cert-file")
		if got, err := servedCertificate(gw); err != nil || !got.Equal(next.Cert) {
			t.Fatalf("after a bad serving certificate file the gateway serves %v (%v), want the rotated certificate", got.Subject, err)
		}
		fresh := gw.adminClient()
		defer fresh.CloseIdleConnections()
		if resp := mustDo(t, fresh, http.MethodGet, gw.URL+"/api/v1/namespaces/default", nil, nil); resp.status != http.StatusOK {
			t.Fatalf("a new connection after a bad serving certificate file: HTTP %d: %s", resp.status, resp.body)
		}
		requireWatchRunning(t)
	})

	t.Run("front-proxy client certificate", func(t *testing.T) {
		// Asserted: the identity is the client certificate's, carried by the front-proxy
		// certificate the gateway presents.
		asserted := func() (reviewAnswer, error) {
			client := gw.adminClient()
			defer client.CloseIdleConnections()
			resp, err := do(client, http.MethodPost, gw.URL+"/apis/authentication.k8s.io/v1/selfsubjectreviews", nil,
				[]byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`))
			if err != nil {
				return reviewAnswer{}, err
			}
			return parseReview(resp)
		}
		expectUser := func(what, user string) {
			t.Helper()
			eventually(t, what, certificateReloadTimeout, 200*time.Millisecond, func() error {
				got, err := asserted()
				if err != nil {
					return err
				}
				if got.Code != http.StatusCreated || got.User.Username != user {
					return fmt.Errorf("an asserted request is %s, want user %s", got, user)
				}
				return nil
			})
		}
		expectUser("the admin certificate asserted", testcluster.AdminUser)
		unaccepted := newClientCertificate(t, cluster, pkix.Name{CommonName: rotatedProxyClientName})
		replaceCertificate(t, gw.proxyClientCertFile, gw.proxyClientKeyFile, unaccepted)
		expectUser("asserted requests present the new front-proxy certificate", rotatedProxyClientName)
		good := newClientCertificate(t, cluster, pkix.Name{CommonName: testcluster.FrontProxyClientName})
		replaceCertificate(t, gw.proxyClientCertFile, gw.proxyClientKeyFile, good)
		expectUser("asserted requests present the second new front-proxy certificate", testcluster.AdminUser)
		requireWatchRunning(t)

		gw.rejectsBadFile(t, gw.proxyClientCertFile, "proxy-client-cert-file")
		if got, err := asserted(); err != nil || got.Code != http.StatusCreated || got.User.Username != testcluster.AdminUser {
			t.Fatalf("after a bad front-proxy certificate file an asserted request is %s (%v), want %s", got, err, testcluster.AdminUser)
		}
		requireWatchRunning(t)
	})
}

// servedCertificate opens a new connection to the gateway and returns its serving certificate.
func servedCertificate(g *skewgate) (*x509.Certificate, error) {
	dialer := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{RootCAs: g.ca.Pool(), MinVersion: tls.VersionTLS12}}
	conn, err := dialer.Dial("tcp", "127.0.0.1:"+strconv.Itoa(g.port))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0], nil
}

// replaceCertificate writes cert over certFile and keyFile, each file replaced at once (renamed
// into place), the key first.
func replaceCertificate(t *testing.T, certFile, keyFile string, cert tls.Certificate) {
	t.Helper()
	staged, stagedKey := writeCertificate(t, t.TempDir(), "staged", cert)
	for _, f := range [][2]string{{stagedKey, keyFile}, {staged, certFile}} {
		replaceFile(t, f[1], mustRead(t, f[0]))
	}
}

// replaceFile renames a new file with data over path.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".new")
	writeFile(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// rejectsBadFile replaces path with something that is no certificate and waits until the
// gateway's log reports it, naming the file or its flag.
func (g *skewgate) rejectsBadFile(t *testing.T, path, flag string) {
	t.Helper()
	offset := g.logSize(t)
	replaceFile(t, path, []byte("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n"))
	eventually(t, "the gateway reports the bad "+filepath.Base(path), certificateReloadTimeout, 200*time.Millisecond, func() error {
		logged := g.logSince(t, offset)
		if !strings.Contains(logged, path) && !strings.Contains(logged, flag) {
			return fmt.Errorf("its log names neither %s nor --%s", path, flag)
		}
		return nil
	})
}

func (g *skewgate) logSize(t *testing.T) int64 {
	t.Helper()
	info, err := os.Stat(g.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

// logSince returns what the gateway logged after offset.
func (g *skewgate) logSince(t *testing.T, offset int64) string {
	t.Helper()
	data := mustRead(t, g.logPath)
	if int64(len(data)) < offset {
		return ""
	}
	return string(data[offset:])
}
