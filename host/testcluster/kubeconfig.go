package testcluster

import (
	"encoding/json"
	"os"
	"path/filepath"
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
		CertificateAuthority string `json:"certificate-authority"`
		TLSServerName        string `json:"tls-server-name"`
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
		data, err := json.MarshalIndent(cfg, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(path, append(data, '\n'), 0o600); err != nil {
			return err
		}
	}
	return nil
}
