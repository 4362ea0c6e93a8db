package controller

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"testing"

	"github.com/skewgate/skewgate/host/internal/devpki"
)

func newTestCA(t *testing.T, name string) *devpki.CA {
	t.Helper()
	ca, err := devpki.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// servingCert is an API server's serving certificate for dnsName.
func servingCert(t *testing.T, ca *devpki.CA, dnsName string) tls.Certificate {
	t.Helper()
	leaf, err := ca.Serving("kube-apiserver", dnsName)
	if err != nil {
		t.Fatal(err)
	}
	return leaf.TLSCertificate()
}

// testPKI is what a control plane and the controller need: the serving CA
// (the peer CA), the front-proxy CA and the controller's front-proxy client
// certificate, written to files the way the controller reads them.
type testPKI struct {
	serving, frontProxy *devpki.CA
	servingCert         tls.Certificate
	peerCAFile          string
	clientCertFile      string
	clientKeyFile       string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{serving: newTestCA(t, "serving-ca"), frontProxy: newTestCA(t, "front-proxy-ca")}
	p.servingCert = servingCert(t, p.serving, DefaultServerName)
	client, err := p.frontProxy.Client(pkix.Name{CommonName: "front-proxy-client"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if p.peerCAFile, err = p.serving.WriteFile(dir, "peer-ca"); err != nil {
		t.Fatal(err)
	}
	if p.clientCertFile, p.clientKeyFile, err = client.WriteFiles(dir, "front-proxy-client"); err != nil {
		t.Fatal(err)
	}
	return p
}
