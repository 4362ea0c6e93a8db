package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
)

const pathSelfSubjectReviews = "/apis/authentication.k8s.io/v1/selfsubjectreviews"

// anonymousUser is who kube-apiserver says an unauthenticated request is.
const anonymousUser = "system:anonymous"

var selfSubjectReviewBody = []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)

// forbiddenUser finds the user in a Forbidden Status message, the only place
// kube-apiserver names it: `... is forbidden: User "system:anonymous" cannot create resource ...`.
var forbiddenUser = regexp.MustCompile(`User "([^"]*)" cannot`)

// certificateUser asks the server, with a SelfSubjectReview that carries the
// front-proxy client certificate and no X-Remote-* headers, who that
// certificate alone authenticates as: "" when the server refuses it (401) or
// sees an anonymous request.
func (f *fetcher) certificateUser(ctx context.Context, address string) (string, *fetchError) {
	header := http.Header{"Accept": {"application/json"}, "Content-Type": {"application/json"}}
	resp, ferr := f.do(ctx, http.MethodPost, address, pathSelfSubjectReviews, selfSubjectReviewBody, header)
	if ferr != nil {
		return "", ferr
	}
	var user string
	switch resp.status {
	case http.StatusUnauthorized:
		return "", nil
	case http.StatusOK, http.StatusCreated:
		var review struct {
			Status struct {
				UserInfo struct {
					Username string `json:"username"`
				} `json:"userInfo"`
			} `json:"status"`
		}
		if err := json.Unmarshal(resp.body, &review); err != nil || review.Status.UserInfo.Username == "" {
			return "", &fetchError{pathSelfSubjectReviews, reasonMalformed, fmt.Errorf("no status.userInfo.username in the SelfSubjectReview: %v", err)}
		}
		user = review.Status.UserInfo.Username
	case http.StatusForbidden:
		// Authenticated (or anonymous) but not allowed to ask: the Status
		// message says who.
		var status struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(resp.body, &status)
		m := forbiddenUser.FindStringSubmatch(status.Message)
		if m == nil {
			return "", &fetchError{pathSelfSubjectReviews, reasonMalformed, fmt.Errorf("HTTP 403 without a user in its Status message %q", status.Message)}
		}
		user = m[1]
	default:
		return "", &fetchError{pathSelfSubjectReviews, reasonStatus, fmt.Errorf("HTTP %d", resp.status)}
	}
	if user == anonymousUser {
		return "", nil
	}
	return user, nil
}

// checkFrontProxyCertificate finds out, once per certificate and from one
// healthy server, whether the front-proxy client certificate alone is a
// user: then every request that carries it without an asserted identity is
// that user, which the gateway must never allow and an operator should
// know. It warns and sets the gauge; an inconclusive answer is retried on
// the next full round.
func (c *Controller) checkFrontProxyCertificate(ctx context.Context) {
	if !c.opts.CheckFrontProxyCertificate || !c.frontProxyCheckDue.Load() {
		return
	}
	var healthy []*serverState
	for _, s := range c.servers {
		if s.healthy {
			healthy = append(healthy, s)
		}
	}
	if len(healthy) == 0 {
		return
	}
	s := slices.MinFunc(healthy, func(a, b *serverState) int { return cmp.Compare(a.address, b.address) })
	user, ferr := c.fetcher.certificateUser(ctx, s.address)
	if ferr != nil {
		if ctx.Err() == nil {
			c.metrics.fetchError(s.address, ferr)
			c.log.Info("could not check whether the front-proxy client certificate alone authenticates; retrying on the next poll",
				"address", s.address, "err", ferr)
		}
		return
	}
	c.frontProxyCheckDue.Store(false)
	c.metrics.frontProxyCertificateIsUser(user != "")
	if user == "" {
		c.log.Info("the front-proxy client certificate alone does not authenticate", "address", s.address)
		return
	}
	c.log.Warn("the front-proxy client certificate authenticates as a user on its own: the API server's --client-ca-file trusts the certificate skewgate was given as --proxy-client-cert-file, "+
		"so a request carrying it without an asserted identity is that user. Issue the front-proxy certificate from a CA that only the API server's --requestheader-client-ca-file names; "+
		"while one CA signs both, also set the API server's --requestheader-allowed-names to the front-proxy certificate's common name, so that no other client certificate can assert identities",
		"address", s.address, "user", user)
}
