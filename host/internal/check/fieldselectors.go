package check

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/skewgate/skewgate/host/internal/gateway"
)

// acceptance is whether a side's servers accept a field-selector label.
type acceptance int8

const (
	unknown acceptance = iota
	accepted
	refused
)

// selectorOracle answers which field-selector labels a side accepts: a live
// server is asked (a list with the label and limit=1: 200 or 400, as `make
// fixtures` captures the tables), captured documents answer from their
// table when they have one.
type selectorOracle struct {
	ctx     context.Context
	answers map[selectorQuestion]acceptance
}

type selectorQuestion struct {
	side  *side
	r     GroupVersionResource
	label string
}

func newSelectorOracle(ctx context.Context) *selectorOracle {
	return &selectorOracle{ctx: ctx, answers: map[selectorQuestion]acceptance{}}
}

// tableKey is a resource as field-selector tables spell it: "v1/services",
// "apps/v1/deployments".
func tableKey(r GroupVersionResource) string { return r.GroupVersion.String() + "/" + r.Resource }

func (o *selectorOracle) accepts(s *side, r GroupVersionResource, label string) (acceptance, error) {
	q := selectorQuestion{s, r, label}
	if a, ok := o.answers[q]; ok {
		return a, nil
	}
	a := unknown
	switch {
	case s.client != nil:
		query := url.Values{"fieldSelector": {label + "=x"}, "limit": {"1"}}
		resp, err := s.client.get(o.ctx, r.path(), query, acceptMetadataList)
		switch {
		case err == nil:
			closeBody(resp)
			a = accepted
		case isStatus(err, http.StatusBadRequest):
			a = refused
		default:
			return unknown, s.client.requestError(fmt.Sprintf("asking whether %s accepts field selector %s", r, label), err)
		}
	case s.fieldSelectors != nil:
		if labels, ok := s.fieldSelectors[tableKey(r)]; ok {
			a = refused
			if slices.Contains(labels, label) {
				a = accepted
			}
		}
	}
	o.answers[q] = a
	return a, nil
}

// knownSelector is a field selector a well-known client sends on its own,
// from its source.
type knownSelector struct {
	client string
	// since is the first minor version of the client that sends it.
	since    version
	resource GroupVersionResource
	label    string
	source   string
}

// knownSelectors are the kubelet's: every kubelet of a control-plane node
// that is upgraded with its API server meets both versions during the
// upgrade (kubernetes/kubernetes#127316).
var knownSelectors = []knownSelector{
	{"kubelet", version{1, 0, 0}, GroupVersionResource{GroupVersion{"", "v1"}, "pods"}, "spec.nodeName",
		"pkg/kubelet/config/apiserver.go lists and watches its pods with fieldSelector spec.nodeName=<node>"},
	{"kubelet", version{1, 0, 0}, GroupVersionResource{GroupVersion{"", "v1"}, "nodes"}, "metadata.name",
		"pkg/kubelet/kubelet.go lists and watches its node with fieldSelector metadata.name=<node>"},
	{"kubelet", version{1, 31, 0}, GroupVersionResource{GroupVersion{"", "v1"}, "services"}, "spec.clusterIP",
		"pkg/kubelet/kubelet.go (since 1.31) lists and watches services with fieldSelector spec.clusterIP!=None"},
}

// selectorUse is one label some client selects a resource by.
type selectorUse struct {
	r     GroupVersionResource
	label string
}

// fieldSelectorFindings: field-selector labels clients use (recorded by a
// running skewgate, or sent by the kubelet of either version) that one side
// accepts and the other refuses with 400.
func (a *analysis) fieldSelectorFindings() error {
	uses := map[selectorUse][]string{}
	if a.traffic != nil {
		for _, s := range a.traffic.Shapes {
			if s.Verb != "list" && s.Verb != "watch" {
				continue
			}
			r := GroupVersionResource{GroupVersion{s.Group, s.Version}, s.Resource}
			for _, l := range s.FieldSelector {
				// A record of an older skewgate may hold "(invalid)" or
				// whatever its clients sent.
				if gateway.IsFieldPath(l) {
					u := selectorUse{r, l}
					uses[u] = append(uses[u], fmt.Sprintf("%s %s %d times (recorded by skewgate)", s.UserAgent, s.Verb, s.Count))
				}
			}
		}
	}
	// Kubelets run where Node objects are registered: those of the current
	// version, and during the upgrade those of the target's.
	nodes := a.scan.objects[GroupResource{"", "nodes"}]
	for _, s := range []*side{a.from, a.to} {
		v, ok := parseVersion(s.version)
		if !ok || nodes == 0 {
			continue
		}
		for _, k := range knownSelectors {
			if v.major > k.since.major || v.major == k.since.major && v.minor >= k.since.minor {
				u := selectorUse{k.resource, k.label}
				uses[u] = append(uses[u], fmt.Sprintf("%s %d.%d, on the cluster's %s: %s", k.client, v.major, v.minor,
					plural(nodes, "node", "nodes"), k.source))
			}
		}
	}
	var unknownUses []string
	for _, u := range sortedKeys(uses, func(x, y selectorUse) int {
		return strings.Compare(x.r.String()+" "+x.label, y.r.String()+" "+y.label)
	}) {
		if !a.from.api.Serves(u.r) || !a.to.api.Serves(u.r) {
			continue // served by one side only: a Resource finding's matter
		}
		fromAcc, err := a.selectors.accepts(a.from, u.r, u.label)
		if err != nil {
			return err
		}
		toAcc, err := a.selectors.accepts(a.to, u.r, u.label)
		if err != nil {
			return err
		}
		if fromAcc == unknown || toAcc == unknown {
			unknownUses = append(unknownUses, u.r.String()+" "+u.label)
			continue
		}
		if fromAcc == toAcc {
			continue
		}
		refuser, accepter := a.from, a.to
		if toAcc == refused {
			refuser, accepter = a.to, a.from
		}
		f := Finding{
			Kind:    KindFieldSelector,
			Subject: u.r.String() + " " + u.label,
			Summary: fmt.Sprintf("%s refuses it, %s accepts it; %s", refuser.label, accepter.label, plural(len(uses[u]), "user", "users")),
			During: Verdict{Breaks, fmt.Sprintf("%s answer 400 (%q is not a known field selector) to lists and watches of %s "+
				"selecting on it: the clients below fail whenever such a request lands on one (kubernetes/kubernetes#127316)",
				servers(refuser), u.label, u.r)},
			Skewgate: fmt.Sprintf("sends lists and watches of %s selecting on %s to the servers that accept it", u.r, u.label),
			Evidence: append([]string{
				fmt.Sprintf("%s: %s; %s: %s", a.from.label, describeAcceptance(fromAcc, a.from), a.to.label, describeAcceptance(toAcc, a.to)),
			}, uses[u]...),
			Clients: a.clients(func(s *gateway.RequestShape) bool {
				return s.Group == u.r.Group && s.Version == u.r.Version && s.Resource == u.r.Resource && slices.Contains(s.FieldSelector, u.label)
			}),
		}
		if refuser == a.to {
			f.After = Verdict{Breaks, fmt.Sprintf("every server refuses %s for %s", u.label, u.r)}
		} else {
			f.After = Verdict{Unaffected, "every server accepts it"}
		}
		a.add(f)
	}
	if len(unknownUses) > 0 {
		a.notes = append(a.notes, fmt.Sprintf("field selectors not compared, for want of a captured field-selector table of %s "+
			"(--to-server asks a live server instead): %s", a.to.label, strings.Join(unknownUses, "; ")))
	}
	return nil
}

func describeAcceptance(a acceptance, s *side) string {
	how := "its captured table"
	if s.client != nil {
		how = "a list with it and limit=1"
	}
	if a == accepted {
		return "accepted (" + how + ")"
	}
	return "refused (" + how + ")"
}
