package controller

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/host/internal/logtest"
)

func TestFrontProxyCertificateThatAuthenticatesAloneIsReportedOnce(t *testing.T) {
	const warning = "the front-proxy client certificate authenticates as a user on its own"
	for _, tc := range []struct {
		name string
		// user is who the server takes the certificate alone for.
		user  string
		check bool
		warn  bool
	}{
		{"the client CA trusts the certificate", "front-proxy-client", true, true},
		{"only the request-header CA trusts it", "", true, false},
		{"the certificate alone is anonymous", anonymousUser, true, false},
		{"not asked for outside front-proxy identity mode", "front-proxy-client", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pki := newTestPKI(t)
			plane := discoverytest.SkewedControlPlane()
			a := newFakeAPIServer(t, pki, plane[0].Version, plane[0].Groups)
			a.setCertificateUser(tc.user)
			logs := &logtest.Buffer{}
			opts := testOptions(pki, &recorder{}, a)
			opts.CheckFrontProxyCertificate = tc.check
			opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
			c := startController(t, opts)
			waitUntil(t, "Ready", c.Ready)

			if tc.check {
				waitUntil(t, "the SelfSubjectReview", func() bool { return a.requestCount(pathSelfSubjectReviews) == 1 })
			}
			// Later polls do not ask again.
			readyz := a.requestCount(pathReadyz)
			waitUntil(t, "three more polls", func() bool { return a.requestCount(pathReadyz) >= readyz+3 })
			want := 0
			if tc.check {
				want = 1
			}
			if n := a.requestCount(pathSelfSubjectReviews); n != want {
				t.Errorf("%d SelfSubjectReviews, want %d", n, want)
			}
			if tc.check {
				if h := a.header(pathSelfSubjectReviews); h.Get("X-Remote-User") != "" || h.Get("X-Remote-Group") != "" {
					t.Errorf("the review asserted an identity: %v", h)
				}
			}
			out := logs.String()
			if got := strings.Count(out, warning); got != map[bool]int{true: 1, false: 0}[tc.warn] {
				t.Errorf("warning logged %d times, want it %v:\n%s", got, tc.warn, out)
			}
			if tc.warn {
				for _, flag := range []string{"--client-ca-file", "--proxy-client-cert-file", "--requestheader-client-ca-file", "--requestheader-allowed-names", "user=" + tc.user} {
					if !strings.Contains(out, flag) {
						t.Errorf("the warning does not name %s:\n%s", flag, out)
					}
				}
			}
			gauge := metricValue(t, c, "skewgate_controller_front_proxy_certificate_authenticates")
			if (gauge == 1) != tc.warn {
				t.Errorf("skewgate_controller_front_proxy_certificate_authenticates = %v, want it 1 only with the warning", gauge)
			}
		})
	}
}
