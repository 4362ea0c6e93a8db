package controller

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

func TestNewRejectsInvalidOptions(t *testing.T) {
	pki := newTestPKI(t)
	for _, tc := range []struct {
		name   string
		change func(o *Options)
		want   string
	}{
		{"no callback", func(o *Options) { o.OnSnapshot = nil }, "OnSnapshot is required"},
		{"no peer CA", func(o *Options) { o.PeerCA = nil }, "PeerCA is required"},
		{"no servers", func(o *Options) { o.StaticServers = nil }, "no API servers"},
		{"no credentials", func(o *Options) { o.FrontProxyCertificate = nil }, "no credentials"},
		{"certificate check without a certificate", func(o *Options) {
			o.FrontProxyCertificate = nil
			o.CheckFrontProxyCertificate = true
		}, "CheckFrontProxyCertificate needs FrontProxyCertificate"},
		{"plain http", func(o *Options) { o.StaticServers = []string{"http://10.0.0.1:6443"} }, "must be an https:// URL"},
		{"path after port", func(o *Options) { o.StaticServers = []string{"https://10.0.0.1:6443/apis"} }, "nothing after the port"},
		{"same server twice", func(o *Options) {
			o.StaticServers = []string{"https://10.0.0.1:6443", "https://[::ffff:10.0.0.1]:6443"}
		}, "listed twice"},
		{"cluster name clash", func(o *Options) {
			o.StaticServers = []string{"https://a-b.example:6443", "https://a.b-example:6443"}
		}, "both get the cluster name apiserver-a-b-example-6443"},
		{"too many servers", func(o *Options) {
			o.StaticServers = nil
			for i := range 65 {
				o.StaticServers = append(o.StaticServers, fmt.Sprintf("https://10.0.0.%d:6443", i+1))
			}
		}, "at most 64"},
		{"negative interval", func(o *Options) { o.PollInterval = -time.Second }, "PollInterval must be positive"},
		{"negative readiness interval", func(o *Options) { o.ReadinessInterval = -time.Second }, "ReadinessInterval must be positive"},
		{"negative failure threshold", func(o *Options) { o.FailureThreshold = -1 }, "FailureThreshold must be positive"},
		{"negative timeout", func(o *Options) { o.RequestTimeout = -time.Second }, "RequestTimeout must be positive"},
		{"negative grace", func(o *Options) { o.GracePeriod = -time.Second }, "GracePeriod must be positive"},
		{"negative size limit", func(o *Options) { o.MaxResponseBytes = -1 }, "MaxResponseBytes must be positive"},
		{"negative concurrency", func(o *Options) { o.MaxConcurrentFetches = -1 }, "MaxConcurrentFetches must be positive"},
		{"unknown membership", func(o *Options) { o.Membership = "union" }, `Membership "union": must be cluster or listed`},
		{"listed membership without a list", func(o *Options) {
			o.StaticServers, o.Membership = nil, MembershipListed
			o.Cluster = fakeCluster(fake.NewClientset())
		}, `Membership "listed": no server is listed to be the members`},
		{"REST config with its own transport", func(o *Options) {
			o.FrontProxyCertificate = nil
			o.RESTConfig = &rest.Config{Host: "https://cluster.invalid", Transport: http.DefaultTransport}
			o.Cluster = fakeCluster(fake.NewClientset())
		}, "RESTConfig.Transport is set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(pki, &recorder{})
			o.StaticServers = []string{"https://10.0.0.1:6443"}
			tc.change(&o)
			c, err := New(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, %v; want an error containing %q", c, err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "controller: ") {
				t.Errorf("error %q does not say where it comes from", err)
			}
		})
	}
}

func TestNewFillsInDefaults(t *testing.T) {
	pki := newTestPKI(t)
	c, err := New(Options{
		StaticServers:         []string{"https://10.0.0.1:6443"},
		PeerCA:                pki.peerCA,
		FrontProxyCertificate: pki.clientCert,
		OnSnapshot:            (&recorder{}).OnSnapshot,
	})
	if err != nil {
		t.Fatal(err)
	}
	o := c.opts
	if o.PollInterval != DefaultPollInterval || o.ReadinessInterval != DefaultReadinessInterval || o.FailureThreshold != DefaultFailureThreshold ||
		o.RequestTimeout != DefaultRequestTimeout || o.GracePeriod != DefaultGracePeriod ||
		o.MaxResponseBytes != DefaultMaxResponseBytes || o.MaxConcurrentFetches != DefaultMaxConcurrentFetches ||
		o.ServerName != DefaultServerName || o.Membership != MembershipCluster || o.Logger == nil {
		t.Errorf("defaults not applied: %+v", o)
	}
	fast, err := New(Options{
		StaticServers:         []string{"https://10.0.0.1:6443"},
		PeerCA:                pki.peerCA,
		FrontProxyCertificate: pki.clientCert,
		OnSnapshot:            (&recorder{}).OnSnapshot,
		PollInterval:          100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if fast.opts.ReadinessInterval != 100*time.Millisecond {
		t.Errorf("ReadinessInterval = %v with a 100ms PollInterval, want it capped at PollInterval", fast.opts.ReadinessInterval)
	}
	if c.cluster != nil {
		t.Error("cluster discovery enabled without a cluster client")
	}
	if c.Ready() {
		t.Error("Ready before Run")
	}
	if raw, snap := c.Current(); raw != nil || snap != nil {
		t.Error("a snapshot before Run")
	}
}
