// Package devpki generates short-lived certificate authorities and leaf
// certificates for the demo and for tests that need real TLS: serving
// certificates for API servers and gateways, and client certificates whose
// subject carries an identity.
package devpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// validity is how long generated certificates are valid; NotBefore is set an
// hour back so that a slightly skewed clock still accepts them.
const validity = 24 * time.Hour

// CA is a certificate authority that signs leaf certificates.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// Leaf is a certificate signed by a CA, with its key.
type Leaf struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA generates a self-signed CA named commonName.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devpki: CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		// Digital signature as well, as kubeadm and client-go issue their CAs.
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("devpki: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("devpki: CA certificate: %w", err)
	}
	return &CA{Cert: cert, key: key}, nil
}

// Pool is a certificate pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

// CertPEM is the CA certificate in PEM form.
func (ca *CA) CertPEM() []byte { return certPEM(ca.Cert) }

// Serving issues a server certificate valid for hosts, each an IP address or
// a DNS name.
func (ca *CA) Serving(commonName string, hosts ...string) (*Leaf, error) {
	if len(hosts) == 0 {
		return nil, errors.New("devpki: a serving certificate needs at least one host")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(tmpl)
}

// Client issues a client certificate for subject; kube-apiserver reads the
// common name as the user and the organizations as the groups.
func (ca *CA) Client(subject pkix.Name) (*Leaf, error) {
	return ca.issue(&x509.Certificate{
		Subject:     subject,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (ca *CA) issue(tmpl *x509.Certificate) (*Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devpki: key: %w", err)
	}
	if tmpl.SerialNumber, err = serialNumber(); err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(validity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("devpki: certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("devpki: certificate: %w", err)
	}
	return &Leaf{Cert: cert, key: key}, nil
}

// TLSCertificate is the leaf ready for a tls.Config.
func (l *Leaf) TLSCertificate() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{l.Cert.Raw}, PrivateKey: l.key, Leaf: l.Cert}
}

// CertPEM is the leaf certificate in PEM form.
func (l *Leaf) CertPEM() []byte { return certPEM(l.Cert) }

// KeyPEM is the leaf's private key in PEM form.
func (l *Leaf) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(l.key)
	if err != nil {
		return nil, fmt.Errorf("devpki: key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// WriteFiles writes the leaf as dir/name.crt and dir/name.key (mode 0600) and
// returns their paths.
func (l *Leaf) WriteFiles(dir, name string) (certFile, keyFile string, err error) {
	keyPEM, err := l.KeyPEM()
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, l.CertPEM(), 0o600); err != nil {
		return "", "", fmt.Errorf("devpki: %w", err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("devpki: %w", err)
	}
	return certFile, keyFile, nil
}

// WriteFile writes the CA certificate as dir/name.crt and returns its path.
func (ca *CA) WriteFile(dir, name string) (string, error) {
	path := filepath.Join(dir, name+".crt")
	if err := os.WriteFile(path, ca.CertPEM(), 0o600); err != nil {
		return "", fmt.Errorf("devpki: %w", err)
	}
	return path, nil
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("devpki: serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}
