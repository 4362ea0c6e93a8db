package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/certfile"

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
	// dir holds the files.
	dir            string
	peerCAFile     string
	clientCertFile string
	clientKeyFile  string
	// files watches the three files once watch is called.
	files      *certfile.Watcher
	peerCA     *certfile.CABundle
	clientCert *certfile.KeyPair
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{serving: newTestCA(t, "serving-ca"), frontProxy: newTestCA(t, "front-proxy-ca")}
	p.servingCert = servingCert(t, p.serving, DefaultServerName)
	client, err := p.frontProxy.Client(pkix.Name{CommonName: "front-proxy-client"})
	if err != nil {
		t.Fatal(err)
	}
	p.dir = t.TempDir()
	if p.peerCAFile, err = p.serving.WriteFile(p.dir, "peer-ca"); err != nil {
		t.Fatal(err)
	}
	p.writeClientCert(t, client)
	p.files = certfile.NewWatcher(discardLogger(), 10*time.Millisecond)
	if p.peerCA, err = p.files.CABundle("--peer-ca-file", p.peerCAFile); err != nil {
		t.Fatal(err)
	}
	if p.clientCert, err = p.files.KeyPair("--proxy-client-cert-file/--proxy-client-key-file", p.clientCertFile, p.clientKeyFile); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeClientCert writes leaf as the front-proxy client certificate and key
// files, replacing what they held.
func (p *testPKI) writeClientCert(t *testing.T, leaf *devpki.Leaf) {
	t.Helper()
	var err error
	if p.clientCertFile, p.clientKeyFile, err = leaf.WriteFiles(p.dir, "front-proxy-client"); err != nil {
		t.Fatal(err)
	}
}

// watch follows changes of the PKI's files until the test ends.
func (p *testPKI) watch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.files.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// changed returns a channel that receives a value after each change of the
// bundle or key pair, once its other subscribers have been called.
func changed(subscribe func(func())) <-chan struct{} {
	ch := make(chan struct{}, 16)
	subscribe(func() { ch <- struct{}{} })
	return ch
}
