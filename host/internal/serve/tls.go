package serve

import (
	"crypto/tls"
	"crypto/x509"
	"sync/atomic"

	"github.com/skewgate/skewgate/host/internal/certfile"
	"github.com/skewgate/skewgate/host/internal/gateway"
)

// serverTLSConfig is the gateway listener's TLS configuration, following the
// serving certificate and the client CA: each handshake uses what is current
// then, and established connections keep what they were verified with. A
// resumed session is checked against the current client CA again.
func serverTLSConfig(serving *certfile.KeyPair, clientCA *certfile.CABundle) *tls.Config {
	var clientCAs *x509.CertPool
	if clientCA != nil {
		clientCAs = clientCA.Pool()
	}
	base := gateway.ServerTLSConfig(*serving.Certificate(), clientCAs)
	base.Certificates = nil
	base.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return serving.Certificate(), nil }
	if clientCA == nil {
		return base
	}
	// One configuration per client CA, built when it changes rather than on
	// every handshake.
	var current atomic.Pointer[tls.Config]
	build := func() {
		c := base.Clone()
		c.ClientCAs = clientCA.Pool()
		current.Store(c)
	}
	build()
	clientCA.OnChange(build)
	top := base.Clone()
	top.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return current.Load(), nil }
	return top
}
