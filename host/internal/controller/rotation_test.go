package controller

import (
	"crypto/x509/pkix"
	"os"
	"testing"
)

func TestRotatedPeerCAAndFrontProxyCertificateAreUsedByNewConnections(t *testing.T) {
	pki, a, b := newSkewedPair(t)
	idB := ClusterName(b.address)
	rec := &recorder{}
	opts := testOptions(pki, rec, a, b)
	opts.CheckFrontProxyCertificate = true
	c := startController(t, opts)
	peerCAChanged, clientCertChanged := changed(pki.peerCA.OnChange), changed(pki.clientCert.OnChange)
	pki.watch(t)
	waitUntil(t, "Ready", c.Ready)
	waitUntil(t, "the front-proxy certificate check", func() bool { return b.requestCount(pathSelfSubjectReviews)+a.requestCount(pathSelfSubjectReviews) == 1 })

	// The peer CA file gains the CA that b's next serving certificate comes
	// from; then b switches to it.
	next := newTestCA(t, "next-serving-ca")
	bundle := append(append([]byte{}, pki.serving.CertPEM()...), next.CertPEM()...)
	if err := os.WriteFile(pki.peerCAFile, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	<-peerCAChanged
	// Requests begun before the change are over two probes later.
	readyz := b.requestCount(pathReadyz)
	waitUntil(t, "two more probes of b", func() bool { return b.requestCount(pathReadyz) >= readyz+2 })
	cert := servingCert(t, next, DefaultServerName)
	b.rotated.Store(&cert)
	b.srv.CloseClientConnections()
	readyz = b.requestCount(pathReadyz)
	waitUntil(t, "b probed with its new certificate", func() bool { return b.requestCount(pathReadyz) >= readyz+3 })
	if n := metricValue(t, c, fetchErrorSeries(b.address, pathReadyz, reasonTLS)); n != 0 {
		t.Fatalf("%v probes of b failed verification after the peer CA file gained its CA", n)
	}

	// A new front-proxy certificate: the next requests present it, and the
	// check is made again.
	leaf, err := pki.frontProxy.Client(pkix.Name{CommonName: "front-proxy-client-2"})
	if err != nil {
		t.Fatal(err)
	}
	pki.writeClientCert(t, leaf)
	<-clientCertChanged
	waitUntil(t, "requests with the new front-proxy certificate", func() bool {
		return a.requestsFrom("front-proxy-client-2") > 0 && b.requestsFrom("front-proxy-client-2") > 0
	})
	waitUntil(t, "the certificate check again", func() bool {
		return b.requestCount(pathSelfSubjectReviews)+a.requestCount(pathSelfSubjectReviews) == 2
	})

	// A bad peer CA file changes nothing: b, now verified by the new CA, stays.
	if err := os.WriteFile(pki.peerCAFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	readyz = b.requestCount(pathReadyz)
	waitUntil(t, "more probes of b", func() bool { return b.requestCount(pathReadyz) >= readyz+3 })
	for _, o := range rec.all() {
		if s := serverByID(o.snap, idB); !s.Healthy {
			t.Fatalf("generation %d marks b unhealthy: its new certificate was not verified with the rotated peer CA", o.snap.Generation)
		}
	}
	if n := metricValue(t, c, fetchErrorSeries(b.address, pathReadyz, reasonTLS)); n != 0 {
		t.Errorf("%v probes of b failed verification", n)
	}
}
