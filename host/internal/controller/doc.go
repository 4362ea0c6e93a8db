// Package controller keeps skewgate's discovery snapshot current: which API
// servers exist, what each one serves (its own nopeer /apis and /api) and
// whether it is healthy.
//
// Servers come from a static list and, given a cluster client, from the
// identity Leases in kube-system (annotation kubernetes.io/peer-advertise-address)
// and the default/kubernetes EndpointSlices for servers that do not announce an
// address. With a cluster client the static list is a bootstrap list: the
// members until the cluster has been read, then the cluster's, followed
// through their changes and kept through an outage of the cluster (see
// Membership in membership.go). Every readiness interval (a second) each
// server's /readyz is probed; every poll interval, and whenever an unhealthy
// server answers ready again, it is also asked for /version, /apis, /api and
// the /openapi/v3 index, because a server that is still starting may serve
// incomplete discovery and one back from a restart may be another version.
// Documents are revalidated with If-None-Match; any bad answer keeps the
// server's last good document.
//
// Liveness comes from the probes, not from lease age (a crashed server's lease
// lingers for hours). A /readyz that answers anything but 200 marks the server
// unhealthy in the next snapshot: kube-apiserver fails it first when it shuts
// down. Probes that time out or cannot connect mark it unhealthy only after
// several in a row, because a loaded server or network misses one now and
// then. A server that is no member any more is unhealthy at once; a server
// leaves the snapshot once it has been unhealthy, or no member, for longer
// than the grace period.
//
// Field-level knowledge (the snapshot's fieldSelectors and missingFields)
// comes from two places. The field-selector labels of built-in resources are
// those `make fixtures` probed on real servers of each captured minor
// version (package fixtures/fieldselectors), chosen by the server's
// /version. Everything else comes from the servers' own OpenAPI v3
// documents: for every group version that servers publish with different
// hashes, each distinct document is fetched once, in the background, reduced
// to its kinds' field paths and selectable fields (package schemafields) and
// dropped; the reductions are kept by hash while some server publishes it.
// The selectable fields a server publishes for a custom resource
// (x-kubernetes-selectable-fields) are the ones it honours: kube-apiserver
// writes them only while its CustomResourceFieldSelectors gate is on.
//
// A new snapshot, with the next generation number, is built only when
// something in it changed, validated with discovery.ParseSnapshot and handed to
// Options.OnSnapshot; a failed hand-over is retried on every poll.
package controller
