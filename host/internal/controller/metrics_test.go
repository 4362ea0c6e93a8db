package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/skewgate/skewgate/host/internal/metricstest"
)

func TestCollectorExposesEveryMetric(t *testing.T) {
	c := &Controller{metrics: newMetrics()}
	m := c.metrics
	failure := errors.New("boom")
	m.fetchError("10.0.0.2:6443", &fetchError{pathAPIs, reasonMalformed, failure})
	m.fetchError("10.0.0.1:6443", &fetchError{pathReadyz, reasonUnreachable, failure})
	m.fetchError("10.0.0.1:6443", &fetchError{pathReadyz, reasonUnreachable, failure})
	m.fetchError("odd\"server\\\n", &fetchError{pathAPIs, reasonStatus, failure})
	m.publishError()
	m.invalidSnapshot()
	m.published(7, 2)
	m.servers(3, 2)
	m.membership([]member{{sources: fromListed | fromLease | fromEndpointSlice}, {sources: fromLease}, {sources: fromLocal | fromEndpointSlice}}, 2)
	m.pollSucceeded(time.UnixMilli(1767225600123))
	m.frontProxyCertificateIsUser(true)
	m.schemaFetched(1000)
	m.schemaFetched(24)
	m.schemaFetchError(&fetchError{pathOpenAPIDocument, reasonStatus, failure})
	m.schemasCached(2, 4373)

	want := `# HELP skewgate_controller_fetch_errors_total Failed requests to API servers, by server address, path and reason.
# TYPE skewgate_controller_fetch_errors_total counter
skewgate_controller_fetch_errors_total{path="/readyz",reason="unreachable",server="10.0.0.1:6443"} 2
skewgate_controller_fetch_errors_total{path="/apis",reason="malformed",server="10.0.0.2:6443"} 1
skewgate_controller_fetch_errors_total{path="/apis",reason="status",server="odd\"server\\\n"} 1
# HELP skewgate_controller_publish_errors_total Snapshots not taken where they are published (in skewgate serve: the plugin VMs rejected the configuration made of it); the previous one stays and the snapshot is offered again on the next poll.
# TYPE skewgate_controller_publish_errors_total counter
skewgate_controller_publish_errors_total 1
# HELP skewgate_controller_invalid_snapshots_total Built snapshots that failed validation and were not published.
# TYPE skewgate_controller_invalid_snapshots_total counter
skewgate_controller_invalid_snapshots_total 1
# HELP skewgate_controller_snapshot_generation Generation of the last published snapshot.
# TYPE skewgate_controller_snapshot_generation gauge
skewgate_controller_snapshot_generation 7
# HELP skewgate_controller_snapshot_servers API servers in the last published snapshot.
# TYPE skewgate_controller_snapshot_servers gauge
skewgate_controller_snapshot_servers 2
# HELP skewgate_controller_servers API servers known and probed.
# TYPE skewgate_controller_servers gauge
skewgate_controller_servers 3
# HELP skewgate_controller_servers_healthy API servers considered healthy: /readyz last answered 200, no connection was refused since, and fewer consecutive probes than the failure threshold timed out or lost their connection since.
# TYPE skewgate_controller_servers_healthy gauge
skewgate_controller_servers_healthy 2
# HELP skewgate_controller_members API servers that are members (probed, and routed to while healthy), by what names them: listed (--apiserver), local (--local-apiserver), lease (an identity Lease), endpointslice (the kubernetes Service's EndpointSlices); a member several name counts under each.
# TYPE skewgate_controller_members gauge
skewgate_controller_members{source="endpointslice"} 2
skewgate_controller_members{source="lease"} 2
skewgate_controller_members{source="listed"} 1
skewgate_controller_members{source="local"} 1
# HELP skewgate_controller_membership_differences API servers listed (--apiserver, --local-apiserver) that the cluster does not announce, plus those it announces that --apiserver, when it lists any, does not; 0 until the cluster's membership has been read, and without --kubeconfig.
# TYPE skewgate_controller_membership_differences gauge
skewgate_controller_membership_differences 2
# HELP skewgate_controller_last_successful_poll_timestamp_seconds End of the last poll after which at least one server was healthy and the published snapshot was up to date.
# TYPE skewgate_controller_last_successful_poll_timestamp_seconds gauge
skewgate_controller_last_successful_poll_timestamp_seconds 1767225600.123
# HELP skewgate_controller_front_proxy_certificate_authenticates 1 when an API server authenticated the front-proxy client certificate alone, without X-Remote-User, as a user: its --client-ca-file trusts it.
# TYPE skewgate_controller_front_proxy_certificate_authenticates gauge
skewgate_controller_front_proxy_certificate_authenticates 1
# HELP skewgate_controller_openapi_documents_fetched_total OpenAPI v3 group-version documents fetched and reduced to field paths: those of a group version whose hash differs between servers, once per hash.
# TYPE skewgate_controller_openapi_documents_fetched_total counter
skewgate_controller_openapi_documents_fetched_total 2
# HELP skewgate_controller_openapi_document_bytes_total Bytes of the OpenAPI v3 documents fetched; each is dropped once reduced.
# TYPE skewgate_controller_openapi_document_bytes_total counter
skewgate_controller_openapi_document_bytes_total 1024
# HELP skewgate_controller_openapi_document_errors_total OpenAPI v3 group-version documents that could not be fetched or read, by reason; retried on later polls.
# TYPE skewgate_controller_openapi_document_errors_total counter
skewgate_controller_openapi_document_errors_total{reason="status"} 1
# HELP skewgate_controller_openapi_documents Reduced OpenAPI v3 documents held: one per hash of a group version whose hash differs between servers.
# TYPE skewgate_controller_openapi_documents gauge
skewgate_controller_openapi_documents 2
# HELP skewgate_controller_openapi_field_paths Field paths held by the reduced OpenAPI v3 documents, over all their kinds.
# TYPE skewgate_controller_openapi_field_paths gauge
skewgate_controller_openapi_field_paths 4373
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}

	m.forgetServer("10.0.0.1:6443")
	out := exposition(t, c)
	if strings.Contains(out, `server="10.0.0.1:6443"`) || !strings.Contains(out, `server="10.0.0.2:6443"`) {
		t.Errorf("forgetting 10.0.0.1:6443 left:\n%s", out)
	}
}

// exposition is the controller's metrics in the text format, as /metrics
// serves them.
func exposition(t testing.TB, c *Controller) string {
	t.Helper()
	out, err := writeExposition(c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func writeExposition(c prometheus.Collector) (string, error) {
	return metricstest.Exposition(c)
}
