package testcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"

	"github.com/skewgate/skewgate/host/internal/devpki"
)

// ServingServerName is the TLS server name every kube-apiserver certificate is valid for; peers
// verify each other with it (upstream hard-codes it for the mixed version proxy).
const ServingServerName = "kubernetes.default.svc"

// FrontProxyClientName is the common name of the front-proxy client certificate and the only name
// the servers accept request-header identities from.
const FrontProxyClientName = "front-proxy-client"

// KubeletClientName is the common name of the client certificate the API servers present to
// kubelets (--kubelet-client-certificate), as kubeadm names it; the stand-in kubelet serves no
// other client.
const KubeletClientName = "kube-apiserver-kubelet-client"

// Identities behind the generated credentials.
const (
	AdminUser        = "skewgate-admin"
	UnprivilegedUser = "skewgate-user"
)

// servingHosts are the names and address the serving certificate is valid for: loopback, the
// in-cluster service names, and ServingServerName, under which peers and proxies verify.
var servingHosts = []string{"localhost", "kubernetes", "kubernetes.default", ServingServerName, "127.0.0.1"}

// PKIFiles are the paths, inside the cluster directory, of the credentials as files: what the
// servers read, and what processes run next to the cluster (proxies, load generators) are given.
type PKIFiles struct {
	CACert, ServingCert, ServingKey           string
	FrontProxyCACert                          string
	FrontProxyClientCert, FrontProxyClientKey string
	AdminCert, AdminKey                       string
	KubeletClientCert, KubeletClientKey       string
	// AdminToken holds the admin bearer token alone, for clients that read their token from a file.
	AdminToken                           string
	ServiceAccountKey, ServiceAccountPub string
	// Tokens is the servers' --token-auth-file.
	Tokens string
}

// PKI is a generated set of credentials for one cluster.
type PKI struct {
	CA *x509.Certificate
	// FrontProxyCA signs the front-proxy client certificate; it is CA itself in a one-CA cluster.
	FrontProxyCA     *x509.Certificate
	Serving          tls.Certificate
	FrontProxyClient tls.Certificate
	Admin            tls.Certificate
	// KubeletClient is what the API servers authenticate with at kubelets.
	KubeletClient tls.Certificate
	AdminToken    string
	UserToken     string
	Files         PKIFiles

	// PEM encodings kept for kubeconfigs and rest.Configs.
	caPEM, adminCertPEM, adminKeyPEM []byte
	// ca issues further client certificates (IssueClient).
	ca *devpki.CA
}

// newPKI generates the cluster CA, the front-proxy CA (unless oneCA makes the cluster CA sign the
// front-proxy client certificate too), leaf certificates, a service-account key pair and a static
// token file, and writes them into dir.
func newPKI(dir string, oneCA bool) (*PKI, error) {
	ca, err := devpki.NewCA("skewgate-test-cluster-ca")
	if err != nil {
		return nil, err
	}
	// By default request-header identities are only believed from certificates of their own CA,
	// so that no client certificate of the cluster CA can assert one.
	frontProxyCA := ca
	if !oneCA {
		if frontProxyCA, err = devpki.NewCA("skewgate-test-front-proxy-ca"); err != nil {
			return nil, err
		}
	}
	serving, err := ca.Serving("kube-apiserver", servingHosts...)
	if err != nil {
		return nil, err
	}
	frontProxyClient, err := frontProxyCA.Client(pkix.Name{CommonName: FrontProxyClientName})
	if err != nil {
		return nil, err
	}
	admin, err := ca.Client(pkix.Name{CommonName: AdminUser, Organization: []string{"system:masters"}})
	if err != nil {
		return nil, err
	}
	kubeletClient, err := ca.Client(pkix.Name{CommonName: KubeletClientName})
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
	adminKeyPEM, err := admin.KeyPEM()
	if err != nil {
		return nil, err
	}

	p := &PKI{
		CA:               ca.Cert,
		FrontProxyCA:     frontProxyCA.Cert,
		Serving:          serving.TLSCertificate(),
		FrontProxyClient: frontProxyClient.TLSCertificate(),
		Admin:            admin.TLSCertificate(),
		KubeletClient:    kubeletClient.TLSCertificate(),
		AdminToken:       adminToken,
		UserToken:        userToken,
		caPEM:            ca.CertPEM(),
		adminCertPEM:     admin.CertPEM(),
		adminKeyPEM:      adminKeyPEM,
		ca:               ca,
		Files: PKIFiles{
			AdminToken:        filepath.Join(dir, "admin.token"),
			ServiceAccountKey: filepath.Join(dir, "service-account.key"),
			ServiceAccountPub: filepath.Join(dir, "service-account.pub"),
			Tokens:            filepath.Join(dir, "tokens.csv"),
		},
	}
	if p.Files.CACert, err = ca.WriteFile(dir, "ca"); err != nil {
		return nil, err
	}
	// With one CA the servers are given one CA file for both purposes, as installers that use one
	// CA do.
	p.Files.FrontProxyCACert = p.Files.CACert
	if !oneCA {
		if p.Files.FrontProxyCACert, err = frontProxyCA.WriteFile(dir, "front-proxy-ca"); err != nil {
			return nil, err
		}
	}
	if p.Files.ServingCert, p.Files.ServingKey, err = serving.WriteFiles(dir, "serving"); err != nil {
		return nil, err
	}
	if p.Files.FrontProxyClientCert, p.Files.FrontProxyClientKey, err = frontProxyClient.WriteFiles(dir, "front-proxy-client"); err != nil {
		return nil, err
	}
	if p.Files.AdminCert, p.Files.AdminKey, err = admin.WriteFiles(dir, "admin"); err != nil {
		return nil, err
	}
	if p.Files.KubeletClientCert, p.Files.KubeletClientKey, err = kubeletClient.WriteFiles(dir, "kubelet-client"); err != nil {
		return nil, err
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
		{p.Files.ServiceAccountKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: saKeyDER})},
		{p.Files.ServiceAccountPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER})},
		{p.Files.Tokens, []byte(tokens)},
		{p.Files.AdminToken, []byte(adminToken + "\n")},
	}
	for _, w := range writes {
		if err := os.WriteFile(w.path, w.data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// NewClient issues a client certificate for subject, signed by the cluster CA (in a one-CA
// cluster also the front-proxy CA).
func (p *PKI) NewClient(subject pkix.Name) (*devpki.Leaf, error) { return p.ca.Client(subject) }

// IssueClient writes a client certificate for subject, signed by the cluster CA, as name.crt and
// name.key in dir: the kind of credential kubeadm gives each control-plane component.
func (p *PKI) IssueClient(dir, name string, subject pkix.Name) (certFile, keyFile string, err error) {
	leaf, err := p.NewClient(subject)
	if err != nil {
		return "", "", err
	}
	return leaf.WriteFiles(dir, name)
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

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
