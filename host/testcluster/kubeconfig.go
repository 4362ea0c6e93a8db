package testcluster

import (
	"crypto/x509/pkix"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
)

// Kubeconfig files are written as JSON, which every kubeconfig reader accepts as YAML.
type kubeconfigFile struct {
	APIVersion     string              `json:"apiVersion"`
	Kind           string              `json:"kind"`
	Clusters       []kubeconfigCluster `json:"clusters"`
	Users          []kubeconfigUser    `json:"users"`
	Contexts       []kubeconfigContext `json:"contexts"`
	CurrentContext string              `json:"current-context"`
}

type kubeconfigCluster struct {
	Name    string `json:"name"`
	Cluster struct {
		Server               string `json:"server"`
		CertificateAuthority string `json:"certificate-authority,omitempty"`
		TLSServerName        string `json:"tls-server-name,omitempty"`
	} `json:"cluster"`
}

type kubeconfigUser struct {
	Name string `json:"name"`
	User struct {
		ClientCertificate string `json:"client-certificate,omitempty"`
		ClientKey         string `json:"client-key,omitempty"`
		Token             string `json:"token,omitempty"`
	} `json:"user"`
}

type kubeconfigContext struct {
	Name    string `json:"name"`
	Context struct {
		Cluster string `json:"cluster"`
		User    string `json:"user"`
	} `json:"context"`
}

// writeKubeconfigs writes the admin certificate and admin token kubeconfigs, each with one
// context per server. Server URLs survive restarts, so the files never need rewriting.
func (c *Cluster) writeKubeconfigs() error {
	var cert, token kubeconfigUser
	cert.Name = AdminUser
	cert.User.ClientCertificate = c.pki.Files.AdminCert
	cert.User.ClientKey = c.pki.Files.AdminKey
	token.Name = AdminUser + "-token"
	token.User.Token = c.pki.AdminToken

	c.adminKubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	c.tokenKubeconfig = filepath.Join(c.dir, "admin-token.kubeconfig")
	for path, user := range map[string]kubeconfigUser{c.adminKubeconfig: cert, c.tokenKubeconfig: token} {
		cfg := kubeconfigFile{APIVersion: "v1", Kind: "Config", Users: []kubeconfigUser{user}}
		for _, s := range c.servers {
			var cl kubeconfigCluster
			cl.Name = s.info.Name
			cl.Cluster.Server = s.info.URL
			cl.Cluster.CertificateAuthority = c.pki.Files.CACert
			cl.Cluster.TLSServerName = ServingServerName
			var ctx kubeconfigContext
			ctx.Name = s.info.Name
			ctx.Context.Cluster = s.info.Name
			ctx.Context.User = user.Name
			cfg.Clusters = append(cfg.Clusters, cl)
			cfg.Contexts = append(cfg.Contexts, ctx)
		}
		cfg.CurrentContext = c.servers[0].info.Name
		if err := writeKubeconfig(path, cfg); err != nil {
			return err
		}
	}
	return nil
}

func writeKubeconfig(path string, cfg kubeconfigFile) error {
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o600)
}

// WriteComponentKubeconfig writes a kubeconfig shaped like the ones kubeadm writes for the
// control-plane components (controller-manager.conf, scheduler.conf): a cluster named
// "kubernetes" at server, verified against caFile as tlsServerName (both empty for a plain-HTTP
// server), and a client certificate for user signed by the cluster CA, kept next to path.
func (c *Cluster) WriteComponentKubeconfig(path, user, server, caFile, tlsServerName string) error {
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	certFile, keyFile, err := c.pki.IssueClient(filepath.Dir(path), base+"-client", pkix.Name{CommonName: user})
	if err != nil {
		return err
	}
	var cl kubeconfigCluster
	cl.Name = "kubernetes"
	cl.Cluster.Server = server
	cl.Cluster.CertificateAuthority = caFile
	cl.Cluster.TLSServerName = tlsServerName
	var u kubeconfigUser
	u.Name = user
	u.User.ClientCertificate = certFile
	u.User.ClientKey = keyFile
	var ctx kubeconfigContext
	ctx.Name = user + "@kubernetes"
	ctx.Context.Cluster, ctx.Context.User = cl.Name, user
	return writeKubeconfig(path, kubeconfigFile{APIVersion: "v1", Kind: "Config", Clusters: []kubeconfigCluster{cl},
		Users: []kubeconfigUser{u}, Contexts: []kubeconfigContext{ctx}, CurrentContext: ctx.Name})
}
