package testcluster

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSpecValidationRejectsAmbiguousOrContradictoryServers(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec Spec
		ok   bool
	}{
		{"one server", Spec{Servers: []ServerSpec{{Name: "a", Version: KubeVersion135}}}, true},
		{"mixed versions with MVP", Spec{Servers: []ServerSpec{{Name: "a", Version: KubeVersion135, MVP: true}, {Name: "b", Version: KubeVersion136, MVP: true}}}, true},
		{"no servers", Spec{}, false},
		{"duplicate names", Spec{Servers: []ServerSpec{{Name: "a", Version: KubeVersion135}, {Name: "a", Version: KubeVersion136}}}, false},
		{"upper-case name", Spec{Servers: []ServerSpec{{Name: "Server", Version: KubeVersion135}}}, false},
		{"name with a dot", Spec{Servers: []ServerSpec{{Name: "a.b", Version: KubeVersion135}}}, false},
		{"bad version", Spec{Servers: []ServerSpec{{Name: "a", Version: "1.35"}}}, false},
		{"MVP with its gate off", Spec{Servers: []ServerSpec{{Name: "a", Version: KubeVersion136, MVP: true, FeatureGates: map[string]bool{gateMixedVersionProxy: false}}}}, false},
		{"MVP with identity off", Spec{Servers: []ServerSpec{{Name: "a", Version: KubeVersion135, MVP: true, FeatureGates: map[string]bool{gateServerIdentity: false}}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.spec.validate(); (err == nil) != tc.ok {
				t.Errorf("validate = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func testClusterForArgs() *Cluster {
	return &Cluster{
		etcdURL: "http://127.0.0.1:2379",
		pki: &PKI{Files: PKIFiles{
			CACert: "ca.crt", ServingCert: "serving.crt", ServingKey: "serving.key",
			FrontProxyCACert: "fp-ca.crt", FrontProxyClientCert: "fp.crt", FrontProxyClientKey: "fp.key",
			KubeletClientCert: "kubelet-client.crt", KubeletClientKey: "kubelet-client.key",
			ServiceAccountKey: "sa.key", ServiceAccountPub: "sa.pub", Tokens: "tokens.csv",
		}},
	}
}

func TestAPIServerArgsWireAuthenticationAndPeerFlags(t *testing.T) {
	c := testClusterForArgs()
	common := []string{
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=6443",
		"--tls-cert-file=serving.crt",
		"--tls-private-key-file=serving.key",
		"--client-ca-file=ca.crt",
		"--requestheader-client-ca-file=fp-ca.crt",
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-uid-headers=X-Remote-Uid",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=fp.crt",
		"--proxy-client-key-file=fp.key",
		"--authorization-mode=RBAC",
		"--token-auth-file=tokens.csv",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=sa.pub",
		"--service-account-signing-key-file=sa.key",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--endpoint-reconciler-type=none",
		"--kubelet-client-certificate=kubelet-client.crt",
		"--kubelet-client-key=kubelet-client.key",
		"--kubelet-certificate-authority=ca.crt",
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
	}
	for _, tc := range []struct {
		name string
		spec ServerSpec
		want []string
	}{
		{
			name: "plain server",
			spec: ServerSpec{Name: "a", Version: KubeVersion135},
			want: common,
		},
		{
			name: "MVP adds the peer flags and both gates, sorted",
			spec: ServerSpec{Name: "a", Version: KubeVersion135, MVP: true},
			want: append(slices.Clone(common),
				"--peer-ca-file=ca.crt",
				"--peer-advertise-ip=127.0.0.1",
				"--peer-advertise-port=6443",
				"--feature-gates=APIServerIdentity=true,UnknownVersionInteroperabilityProxy=true",
			),
		},
		{
			name: "before 1.32 no UID header, which those servers do not know",
			spec: ServerSpec{Name: "a", Version: KubeVersion131},
			want: slices.DeleteFunc(slices.Clone(common), func(a string) bool { return a == "--requestheader-uid-headers=X-Remote-Uid" }),
		},
		{
			name: "shutdown delay and Retry-After while draining",
			spec: ServerSpec{Name: "a", Version: KubeVersion136, ShutdownDelay: 10 * time.Second, ShutdownSendRetryAfter: true},
			want: append(slices.Clone(common),
				"--shutdown-delay-duration=10s",
				"--shutdown-send-retry-after=true",
			),
		},
		{
			name: "runtime config, gates and extra args",
			spec: ServerSpec{
				Name: "a", Version: KubeVersion136,
				RuntimeConfig: []string{"coordination.k8s.io/v1alpha2=true", "storage.k8s.io/v1beta1=true"},
				FeatureGates:  map[string]bool{"ZGate": false, "AGate": true},
				ExtraArgs:     []string{"--v=4"},
			},
			want: append(slices.Clone(common),
				"--feature-gates=AGate=true,ZGate=false",
				"--runtime-config=coordination.k8s.io/v1alpha2=true,storage.k8s.io/v1beta1=true",
				"--v=4",
			),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := c.apiserverArgs(&apiServer{spec: tc.spec, port: 6443})
			if !slices.Equal(got, tc.want) {
				t.Errorf("args:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestAPIServerArgsGiveEachServerItsOwnAuditLog(t *testing.T) {
	c := testClusterForArgs()
	c.dir = "cluster"
	c.auditPolicyFile = "cluster/audit-policy.yaml"
	for _, name := range []string{"a", "b"} {
		got := c.apiserverArgs(&apiServer{spec: ServerSpec{Name: name, Version: KubeVersion136, ExtraArgs: []string{"--v=4"}}, port: 6443})
		want := []string{"--audit-policy-file=cluster/audit-policy.yaml", "--audit-log-path=cluster/" + name + "-audit.log", "--v=4"}
		if tail := got[len(got)-len(want):]; !slices.Equal(tail, want) {
			t.Errorf("server %s args end in %q, want %q", name, tail, want)
		}
	}
}

func TestAPIServerArgsLeaveTheSpecGatesUntouched(t *testing.T) {
	gates := map[string]bool{"AGate": true}
	testClusterForArgs().apiserverArgs(&apiServer{spec: ServerSpec{Name: "a", Version: KubeVersion135, MVP: true, FeatureGates: gates}, port: 1})
	if len(gates) != 1 {
		t.Errorf("spec feature gates were modified: %v", gates)
	}
}
