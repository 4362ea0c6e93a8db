package kubecluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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

// ServingServerName is the name every kube-apiserver certificate is valid for;
// upstream's mixed version proxy verifies peers under it, and so does skewgate.
const ServingServerName = "kubernetes.default.svc"

// FrontProxyClientName is the only name the servers accept X-Remote-*
// identities from.
const FrontProxyClientName = "front-proxy-client"

// AdminUser is the identity of the admin bearer token (group system:masters).
const AdminUser = "bench-admin"

// PKI is the credentials of one benchmark cluster, as files.
type PKI struct {
	// CA signs the serving certificate; it is what clients and peers verify.
	CA string
	// ServingCert and ServingKey serve every kube-apiserver, and the proxies in
	// front of them: valid for 127.0.0.1 and ServingServerName.
	ServingCert, ServingKey string
	FrontProxyCA            string
	// FrontProxyClientCert and FrontProxyClientKey assert identities to the
	// servers (upstream's peer proxy and skewgate's controller use them).
	FrontProxyClientCert, FrontProxyClientKey string
	ServiceAccountKey, ServiceAccountPub      string
	// Tokens is the servers' --token-auth-file; AdminTokenFile holds the admin
	// token alone, for clients.
	Tokens, AdminTokenFile string
	AdminToken             string
}

type keyPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// newPKI generates the cluster's credentials into dir.
func newPKI(dir string) (*PKI, error) {
	now := time.Now()
	ca, err := newCertificate(certificateRequest{subject: pkix.Name{CommonName: "skewgate-bench-ca"}, isCA: true, now: now})
	if err != nil {
		return nil, err
	}
	frontProxyCA, err := newCertificate(certificateRequest{subject: pkix.Name{CommonName: "skewgate-bench-front-proxy-ca"}, isCA: true, now: now})
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
	serviceAccount, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	token := make([]byte, 24)
	if _, err := rand.Read(token); err != nil {
		return nil, err
	}
	p := &PKI{
		CA:                   filepath.Join(dir, "ca.crt"),
		ServingCert:          filepath.Join(dir, "serving.crt"),
		ServingKey:           filepath.Join(dir, "serving.key"),
		FrontProxyCA:         filepath.Join(dir, "front-proxy-ca.crt"),
		FrontProxyClientCert: filepath.Join(dir, "front-proxy-client.crt"),
		FrontProxyClientKey:  filepath.Join(dir, "front-proxy-client.key"),
		ServiceAccountKey:    filepath.Join(dir, "service-account.key"),
		ServiceAccountPub:    filepath.Join(dir, "service-account.pub"),
		Tokens:               filepath.Join(dir, "tokens.csv"),
		AdminTokenFile:       filepath.Join(dir, "admin.token"),
		AdminToken:           hex.EncodeToString(token),
	}
	saKey, err := x509.MarshalPKCS8PrivateKey(serviceAccount)
	if err != nil {
		return nil, err
	}
	saPub, err := x509.MarshalPKIXPublicKey(serviceAccount.Public())
	if err != nil {
		return nil, err
	}
	files := []pemFile{
		{p.CA, certPEM(ca)},
		{p.ServingCert, certPEM(serving)},
		{p.FrontProxyCA, certPEM(frontProxyCA)},
		{p.FrontProxyClientCert, certPEM(frontProxyClient)},
		{p.ServiceAccountPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub})},
		{p.ServiceAccountKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: saKey})},
		{p.Tokens, []byte(fmt.Sprintf("%s,%s,%s-uid,\"system:masters\"\n", p.AdminToken, AdminUser, AdminUser))},
		{p.AdminTokenFile, []byte(p.AdminToken + "\n")},
	}
	for _, kp := range []struct {
		path string
		pair keyPair
	}{{p.ServingKey, serving}, {p.FrontProxyClientKey, frontProxyClient}} {
		der, err := x509.MarshalECPrivateKey(kp.pair.key)
		if err != nil {
			return nil, err
		}
		files = append(files, pemFile{kp.path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})})
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

type pemFile struct {
	path string
	data []byte
}

func certPEM(k keyPair) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.cert.Raw})
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
		// Back-dated so that a fresh certificate is never "not yet valid".
		NotBefore:   req.now.Add(-time.Hour),
		NotAfter:    req.now.Add(24 * time.Hour),
		DNSNames:    req.dnsNames,
		IPAddresses: req.ips,
	}
	if req.isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
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
	return keyPair{cert: cert, key: key}, nil
}
