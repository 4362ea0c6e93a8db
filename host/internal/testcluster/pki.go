package testcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// ServingServerName is the TLS server name every kube-apiserver certificate is valid for; peers
// verify each other with it (upstream hard-codes it for the mixed version proxy).
const ServingServerName = "kubernetes.default.svc"

// FrontProxyClientName is the common name of the front-proxy client certificate and the only name
// the servers accept request-header identities from.
const FrontProxyClientName = "front-proxy-client"

// Identities behind the generated credentials.
const (
	AdminUser        = "skewgate-admin"
	UnprivilegedUser = "skewgate-user"
)

// pkiFiles are the paths, inside the cluster directory, of everything the processes read.
type pkiFiles struct {
	caCert, servingCert, servingKey           string
	frontProxyCACert                          string
	frontProxyClientCert, frontProxyClientKey string
	adminCert, adminKey                       string
	serviceAccountKey, serviceAccountPub      string
	tokens                                    string
}

// PKI is a generated set of credentials for one cluster.
type PKI struct {
	CA               *x509.Certificate
	FrontProxyCA     *x509.Certificate
	Serving          tls.Certificate
	FrontProxyClient tls.Certificate
	Admin            tls.Certificate
	AdminToken       string
	UserToken        string

	files pkiFiles
	// PEM encodings kept for kubeconfigs and rest.Configs.
	caPEM, adminCertPEM, adminKeyPEM []byte
}

// keyPair is a certificate with its key and their PEM encodings.
type keyPair struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

func (k keyPair) tlsCertificate() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{k.cert.Raw}, PrivateKey: k.key, Leaf: k.cert}
}

// newPKI generates the cluster CA, the front-proxy CA, leaf certificates, a service-account key
// pair and a static token file, and writes them into dir.
func newPKI(dir string) (*PKI, error) {
	now := time.Now()
	ca, err := newCertificate(certificateRequest{subject: pkix.Name{CommonName: "skewgate-test-cluster-ca"}, isCA: true, now: now})
	if err != nil {
		return nil, err
	}
	frontProxyCA, err := newCertificate(certificateRequest{subject: pkix.Name{CommonName: "skewgate-test-front-proxy-ca"}, isCA: true, now: now})
	if err != nil {
		return nil, err
	}
	serving, err := newCertificate(certificateRequest{
		subject:  pkix.Name{CommonName: "kube-apiserver"},
		dnsNames: []string{"localhost", "kubernetes", "kubernetes.default", ServingServerName},
		ips:      []net.IP{net.IPv4(127, 0, 0, 1)},
		usage:    x509.ExtKeyUsageServerAuth,
		issuer:   &ca,
		now:      now,
	})
	if err != nil {
		return nil, err
	}
	frontProxyClient, err := newCertificate(certificateRequest{
		subject: pkix.Name{CommonName: FrontProxyClientName},
		usage:   x509.ExtKeyUsageClientAuth,
		issuer:  &frontProxyCA,
		now:     now,
	})
	if err != nil {
		return nil, err
	}
	admin, err := newCertificate(certificateRequest{
		subject: pkix.Name{CommonName: AdminUser, Organization: []string{"system:masters"}},
		usage:   x509.ExtKeyUsageClientAuth,
		issuer:  &ca,
		now:     now,
	})
	if err != nil {
		return nil, err
	}
	serviceAccountKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	adminToken, err := randomToken()
	if err != nil {
		return nil, err
	}
	userToken, err := randomToken()
	if err != nil {
		return nil, err
	}

	p := &PKI{
		CA:               ca.cert,
		FrontProxyCA:     frontProxyCA.cert,
		Serving:          serving.tlsCertificate(),
		FrontProxyClient: frontProxyClient.tlsCertificate(),
		Admin:            admin.tlsCertificate(),
		AdminToken:       adminToken,
		UserToken:        userToken,
		caPEM:            ca.certPEM,
		adminCertPEM:     admin.certPEM,
		adminKeyPEM:      admin.keyPEM,
		files: pkiFiles{
			caCert:               filepath.Join(dir, "ca.crt"),
			servingCert:          filepath.Join(dir, "serving.crt"),
			servingKey:           filepath.Join(dir, "serving.key"),
			frontProxyCACert:     filepath.Join(dir, "front-proxy-ca.crt"),
			frontProxyClientCert: filepath.Join(dir, "front-proxy-client.crt"),
			frontProxyClientKey:  filepath.Join(dir, "front-proxy-client.key"),
			adminCert:            filepath.Join(dir, "admin.crt"),
			adminKey:             filepath.Join(dir, "admin.key"),
			serviceAccountKey:    filepath.Join(dir, "service-account.key"),
			serviceAccountPub:    filepath.Join(dir, "service-account.pub"),
			tokens:               filepath.Join(dir, "tokens.csv"),
		},
	}

	saKeyDER, err := x509.MarshalPKCS8PrivateKey(serviceAccountKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(serviceAccountKey.Public())
	if err != nil {
		return nil, err
	}
	// Groups of the admin token grant cluster-admin; the other user only gets what RBAC gives
	// system:authenticated.
	tokens := fmt.Sprintf("%s,%s,%s-uid,\"system:masters\"\n%s,%s,%s-uid\n",
		adminToken, AdminUser, AdminUser, userToken, UnprivilegedUser, UnprivilegedUser)

	writes := []struct {
		path string
		data []byte
	}{
		{p.files.caCert, ca.certPEM},
		{p.files.servingCert, serving.certPEM},
		{p.files.servingKey, serving.keyPEM},
		{p.files.frontProxyCACert, frontProxyCA.certPEM},
		{p.files.frontProxyClientCert, frontProxyClient.certPEM},
		{p.files.frontProxyClientKey, frontProxyClient.keyPEM},
		{p.files.adminCert, admin.certPEM},
		{p.files.adminKey, admin.keyPEM},
		{p.files.serviceAccountKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: saKeyDER})},
		{p.files.serviceAccountPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER})},
		{p.files.tokens, []byte(tokens)},
	}
	for _, w := range writes {
		if err := os.WriteFile(w.path, w.data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// CAPool returns a pool holding only the cluster CA, which signs every serving certificate.
func (p *PKI) CAPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.CA)
	return pool
}

// FrontProxyCAPool returns a pool holding only the front-proxy CA.
func (p *PKI) FrontProxyCAPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.FrontProxyCA)
	return pool
}

type certificateRequest struct {
	subject  pkix.Name
	isCA     bool
	dnsNames []string
	ips      []net.IP
	usage    x509.ExtKeyUsage
	issuer   *keyPair // nil: self-signed
	now      time.Time
}

func newCertificate(req certificateRequest) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return keyPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      req.subject,
		// Back-dated so that small clock differences never make a fresh certificate "not yet valid".
		NotBefore:   req.now.Add(-time.Hour),
		NotAfter:    req.now.Add(7 * 24 * time.Hour),
		DNSNames:    req.dnsNames,
		IPAddresses: req.ips,
	}
	if req.isCA {
		tmpl.IsCA = true
		tmpl.BasicConstraintsValid = true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{req.usage}
	}
	parent, signer := tmpl, crypto.Signer(key)
	if req.issuer != nil {
		parent, signer = req.issuer.cert, req.issuer.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		return keyPair{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return keyPair{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
