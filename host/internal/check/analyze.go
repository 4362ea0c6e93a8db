package check

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/skewgate/skewgate/host/internal/gateway"
)

// analysis turns what was read into findings. Every finding is built from a
// fact in the data (an object, a reference, a configuration object, a
// request shape) meeting a difference between the two sides' documents.
type analysis struct {
	from, to *side
	cfg      *configuration
	scan     *scanResult
	// traffic is the request record of a running skewgate, nil without
	// --from-skewgate.
	traffic *gateway.RequestShapes
	// selectors answers which field-selector labels each side accepts.
	selectors *selectorOracle
	// skew lists the fields one side's schema lacks; nil when not known.
	skew *schemaSkew

	findings []Finding
	notes    []string
}

// sideOf names the side that serves something and the one that does not.
func (a *analysis) sideOf(servedByFrom bool) (has, lacks *side) {
	if servedByFrom {
		return a.from, a.to
	}
	return a.to, a.from
}

func (a *analysis) add(f Finding) { a.findings = append(a.findings, f) }

// servers names a side's API servers in verdicts: "v1.35.4 servers".
func servers(s *side) string { return s.label + " servers" }

// served describes, as evidence, which versions of a group resource a side's
// documents list.
func served(s *side, gr GroupResource) string {
	vs := s.api.servedVersions(gr)
	if len(vs) == 0 {
		return fmt.Sprintf("%s (%s) serves no version of %s", s.label, s.source, gr)
	}
	return fmt.Sprintf("%s (%s) serves %s in %s", s.label, s.source, gr, joinVersions(gr.Group, vs))
}

func joinVersions(group string, versions []string) string {
	out := make([]string, len(versions))
	for i, v := range versions {
		out[i] = GroupVersion{group, v}.String()
	}
	return strings.Join(out, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// clients are the recorded request shapes select accepts.
func (a *analysis) clients(selectShape func(*gateway.RequestShape) bool) []Client {
	if a.traffic == nil {
		return nil
	}
	var out []Client
	for i := range a.traffic.Shapes {
		s := &a.traffic.Shapes[i]
		if !selectShape(s) {
			continue
		}
		r := GroupVersionResource{GroupVersion{s.Group, s.Version}, s.Resource}.String()
		if s.Subresource != "" {
			r += "/" + s.Subresource
		}
		out = append(out, Client{UserAgent: s.UserAgent, Verb: s.Verb, Resource: r, FieldSelector: s.FieldSelector, Requests: s.Count})
	}
	return out
}

// groupResources lists every group resource either side serves, sorted.
func (a *analysis) groupResources() []GroupResource {
	set := map[GroupResource]bool{}
	for gr := range a.from.api.versions {
		set[gr] = true
	}
	for gr := range a.to.api.versions {
		set[gr] = true
	}
	return sortedKeys(set, func(x, y GroupResource) int {
		return cmp.Or(cmp.Compare(x.Group, y.Group), cmp.Compare(x.Resource, y.Resource))
	})
}

// resourceOf is the resource serving a kind on either side.
func (a *analysis) resourceOf(k GroupVersionKind) *Resource {
	if r := a.from.api.kind(k); r != nil {
		return r
	}
	return a.to.api.kind(k)
}

// writerEvidence describes the field managers that last wrote objects of a
// kind through the given versions, most objects first.
func (a *analysis) writerEvidence(match func(writerKey) bool) []string {
	keys := slices.Collect(maps.Keys(a.scan.writers))
	slices.SortFunc(keys, func(x, y writerKey) int {
		return cmp.Or(cmp.Compare(a.scan.writers[y].objects, a.scan.writers[x].objects), cmp.Compare(x.manager, y.manager),
			cmp.Compare(x.kind.String(), y.kind.String()))
	})
	var out []string
	for _, k := range keys {
		if !match(k) {
			continue
		}
		w := a.scan.writers[k]
		out = append(out, fmt.Sprintf("field manager %q last wrote %s through %s (metadata.managedFields; latest %s), e.g. %s",
			k.manager, plural(w.objects, "object", "objects"), k.kind.GroupVersion, w.latest, examples(w.examples)))
	}
	return out
}

func (k GroupVersionKind) String() string { return k.GroupVersion.String() + " " + k.Kind }

func examples(refs []objectRef) string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.String()
	}
	return strings.Join(out, ", ")
}

// resourceFindings: group resources only one side serves, in any version,
// that something uses: objects exist, or a recorded client requests them.
func (a *analysis) resourceFindings() {
	for _, gr := range a.groupResources() {
		fromVersions, toVersions := a.from.api.servedVersions(gr), a.to.api.servedVersions(gr)
		if (len(fromVersions) > 0) == (len(toVersions) > 0) {
			continue
		}
		has, lacks := a.sideOf(len(fromVersions) > 0)
		objects := a.scan.objects[gr]
		clients := a.clients(func(s *gateway.RequestShape) bool { return s.Group == gr.Group && s.Resource == gr.Resource })
		if objects == 0 && len(clients) == 0 {
			continue
		}
		versions := has.api.servedVersions(gr)
		f := Finding{
			Kind:    KindResource,
			Subject: gr.String(),
			Summary: fmt.Sprintf("%s, served only by %s", plural(objects, "object", "objects"), has.label),
			During: Verdict{Breaks, fmt.Sprintf("%s answer 404 for %s: through a plain load balancer every request for it that lands on one "+
				"fails, or finds none of its %s", servers(lacks), gr, plural(objects, "object", "objects"))},
			Skewgate: fmt.Sprintf("routes every request for %s to a server that serves it, so none is answered 404 while both versions serve", gr),
			Evidence: []string{served(a.from, gr), served(a.to, gr)},
			Clients:  clients,
		}
		if has == a.from {
			f.After = Verdict{Breaks, fmt.Sprintf("no server serves %s: its %s stay in storage, unreachable through the API, "+
				"until servers that serve it run again", gr, plural(objects, "object", "objects"))}
			f.Skewgate += "; after the upgrade nothing serves it"
		} else {
			f.After = Verdict{Unaffected, "every server serves it"}
		}
		if objects > 0 {
			listedAs := GroupVersionResource{GroupVersion{gr.Group, versions[0]}, gr.Resource}
			for _, r := range a.scan.listed {
				if r.GroupResource() == gr {
					listedAs = r
				}
			}
			f.Evidence = append(f.Evidence, fmt.Sprintf("a metadata list of %s through %s found %s, e.g. %s",
				listedAs, has.label, plural(objects, "object", "objects"), examples(a.scan.examples[gr])))
			if byNS := a.scan.namespaces[gr]; len(byNS) > 0 {
				f.Summary = fmt.Sprintf("%s in %s, served only by %s", plural(objects, "object", "objects"),
					plural(len(byNS), "namespace", "namespaces"), has.label)
			}
		}
		f.Evidence = append(f.Evidence, a.writerEvidence(func(k writerKey) bool {
			r := a.resourceOf(k.kind)
			return r != nil && r.GroupResource() == gr
		})...)
		a.add(f)
	}
}

// apiVersionFindings: resources one side serves in a version the other does
// not, while both serve the group resource, that a writer or a recorded
// client uses through that version: the removed API still in use, found in
// the objects (metadata.managedFields) rather than guessed from annotations.
func (a *analysis) apiVersionFindings() {
	for _, gr := range a.groupResources() {
		fromVersions, toVersions := a.from.api.servedVersions(gr), a.to.api.servedVersions(gr)
		if len(fromVersions) == 0 || len(toVersions) == 0 {
			continue
		}
		for _, r := range a.oneSidedVersions(gr) {
			has, lacks := a.sideOf(a.from.api.Serves(r.GroupVersionResource))
			writers := a.writerEvidence(func(k writerKey) bool { return k.kind.GroupVersion == r.GroupVersion && k.kind.Kind == r.Kind })
			clients := a.clients(func(s *gateway.RequestShape) bool {
				return s.Group == r.Group && s.Version == r.Version && s.Resource == r.Resource
			})
			if len(writers) == 0 && len(clients) == 0 {
				continue
			}
			others := joinVersions(gr.Group, lacks.api.servedVersions(gr))
			f := Finding{
				Subject: r.String(),
				During: Verdict{Breaks, fmt.Sprintf("%s answer 404 for %s: through a plain load balancer the writers and clients below "+
					"fail whenever a request lands on one", servers(lacks), r)},
				Skewgate: fmt.Sprintf("routes requests for %s to %s while they serve", r, servers(has)),
				Evidence: append([]string{served(a.from, gr), served(a.to, gr)}, writers...),
				Clients:  clients,
			}
			users := plural(len(writers), "writer", "writers")
			if len(clients) > 0 {
				users += " and " + plural(len(clients), "client", "clients")
			}
			use := "use"
			if len(writers)+len(clients) == 1 {
				use = "uses"
			}
			if has == a.from {
				f.Kind = KindRemovedAPI
				f.Summary = fmt.Sprintf("%s %s %s, which %s does not serve", users, use, r.GroupVersion, lacks.label)
				f.After = Verdict{Breaks, fmt.Sprintf("%s is not served: these writers and clients must move to %s "+
					"(the objects stay readable through it)", r.GroupVersion, others)}
				f.Skewgate += "; after the upgrade nothing serves it"
			} else {
				f.Kind = KindNewAPI
				f.Summary = fmt.Sprintf("%s %s %s, which %s does not serve", users, use, r.GroupVersion, lacks.label)
				f.After = Verdict{Unaffected, "every server serves it"}
			}
			a.add(f)
		}
	}
}

// oneSidedVersions lists the resources of gr that exactly one side serves.
func (a *analysis) oneSidedVersions(gr GroupResource) []*Resource {
	var out []*Resource
	for _, s := range []*side{a.from, a.to} {
		other := a.to
		if s == a.to {
			other = a.from
		}
		for _, v := range s.api.servedVersions(gr) {
			r := s.api.resource(GroupVersionResource{GroupVersion{gr.Group, v}, gr.Resource})
			if !other.api.Serves(r.GroupVersionResource) {
				out = append(out, r)
			}
		}
	}
	return out
}

// garbageCollectionFindings: dependents whose ownerReferences name an
// apiVersion and kind only one side serves. kube-controller-manager's
// garbage collector resolves an owner reference by exactly that apiVersion
// and kind, then GETs the owner; a 404 marks the owner absent and deletes
// the dependent, and an unresolvable kind leaves the dependent for ever.
func (a *analysis) garbageCollectionFindings() {
	for _, key := range sortedKeys(a.scan.owners, func(x, y [2]string) int { return cmp.Or(cmp.Compare(x[0], y[0]), cmp.Compare(x[1], y[1])) }) {
		use := a.scan.owners[key]
		gv, _ := parseAPIVersion(key[0])
		k := GroupVersionKind{gv, key[1]}
		has, lacks := a.sideOf(a.from.api.kind(k) != nil)
		owner := has.api.kind(k)
		f := Finding{
			Kind:    KindGarbageCollection,
			Subject: k.String(),
			Summary: fmt.Sprintf("%s name owners of a kind only %s serves", plural(use.dependents, "dependent", "dependents"), has.label),
			During: Verdict{Breaks, fmt.Sprintf("a garbage collector that knows %s looks each owner up through the load balancer: "+
				"a lookup that lands on one of the %s is answered 404, the owner is taken for absent and its dependents are "+
				"deleted although it exists; a controller manager whose discovery came from one of the %s cannot resolve the "+
				"kind and collects none of them", k.Kind, servers(lacks), servers(lacks))},
			Skewgate: fmt.Sprintf("owner lookups reach a server that serves %s, and every controller manager behind skewgate "+
				"(at the load balancer, or node-local next to its own server) sees it in merged discovery", k),
			Evidence: []string{
				fmt.Sprintf("%s ownerReferences name apiVersion %s, kind %s, e.g. %s", plural(use.dependents, "object's", "objects'"),
					k.GroupVersion, k.Kind, examples(use.examples)),
				fmt.Sprintf("%s serves %s as %s", has.label, k, owner.GroupVersionResource),
				fmt.Sprintf("%s (%s) does not serve kind %s in %s", lacks.label, lacks.source, k.Kind, k.GroupVersion),
			},
			Clients: a.clients(func(s *gateway.RequestShape) bool {
				return s.Group == owner.Group && s.Version == owner.Version && s.Resource == owner.Resource && s.Verb == "get"
			}),
		}
		if has == a.from {
			f.After = Verdict{Breaks, fmt.Sprintf("no server serves %s: the garbage collector cannot resolve these references, "+
				"retries them for ever and never collects the dependents (kubernetes/kubernetes#96650, #102641)", k)}
			f.Skewgate += "; after the upgrade nothing serves it"
		} else {
			f.After = Verdict{Unaffected, "every server serves the kind"}
		}
		a.add(f)
	}
}

// namespaceFindings: namespaces holding objects of group resources only one
// side serves. The namespace controller deletes what its discovery lists; a
// resource it does not see, or whose requests reach a server that does not
// serve it, is left in storage when the namespace goes.
func (a *analysis) namespaceFindings() {
	type held struct {
		gr      GroupResource
		objects int
		fromOly bool
	}
	byNS := map[string][]held{}
	for gr, counts := range a.scan.namespaces {
		for ns, n := range counts {
			byNS[ns] = append(byNS[ns], held{gr, n, len(a.from.api.servedVersions(gr)) > 0})
		}
	}
	for _, ns := range sortedKeys(byNS, strings.Compare) {
		items := byNS[ns]
		slices.SortFunc(items, func(x, y held) int { return cmp.Compare(x.gr.String(), y.gr.String()) })
		var parts, fromOnly []string
		total := 0
		for _, h := range items {
			has, _ := a.sideOf(h.fromOly)
			parts = append(parts, fmt.Sprintf("%d %s (served only by %s)", h.objects, h.gr, has.label))
			total += h.objects
			if h.fromOly {
				fromOnly = append(fromOnly, h.gr.String())
			}
		}
		f := Finding{
			Kind:    KindNamespaceDeletion,
			Subject: "namespace " + ns,
			Summary: strings.Join(parts, ", "),
			During: Verdict{Breaks, fmt.Sprintf("deleting namespace %s with a controller manager whose discovery lacks these resources, "+
				"or whose requests for them land on a server that does not serve them, finishes the deletion and leaves the %s "+
				"in storage; a namespace of the same name created later shows them again", ns, plural(total, "object", "objects"))},
			Skewgate: "every controller manager behind skewgate sees these resources in merged discovery, and its list and delete " +
				"requests reach a server that serves them",
			Evidence: []string{fmt.Sprintf("metadata lists found in namespace %s: %s", ns, strings.Join(parts, ", "))},
		}
		if len(fromOnly) > 0 {
			f.After = Verdict{Breaks, fmt.Sprintf("%s do not serve %s: deleting the namespace leaves them in storage",
				servers(a.to), strings.Join(fromOnly, ", "))}
			f.Skewgate += "; after the upgrade nothing serves " + strings.Join(fromOnly, ", ")
		} else {
			f.After = Verdict{Unaffected, "every server serves them"}
		}
		a.add(f)
	}
}

// crdFindings: CRDs whose status.storedVersions lists a version the target
// does not serve. A CRD's versions are served by every server of a cluster,
// whatever its version, unless that server serves the group version itself;
// so this is about the objects still stored in a version nothing serves.
func (a *analysis) crdFindings() {
	for _, crd := range a.cfg.crds {
		gr := GroupResource{crd.Spec.Group, crd.Spec.Names.Plural}
		for _, v := range crd.Status.StoredVersions {
			r := GroupVersionResource{GroupVersion{crd.Spec.Group, v}, crd.Spec.Names.Plural}
			if a.to.api.Serves(r) {
				continue
			}
			versions := make([]string, len(crd.Spec.Versions))
			for i, sv := range crd.Spec.Versions {
				versions[i] = fmt.Sprintf("%s (served %t, storage %t)", sv.Name, sv.Served, sv.Storage)
			}
			f := Finding{
				Kind:    KindCRDStoredVersion,
				Subject: "customresourcedefinition " + crd.Metadata.Name + " " + v,
				Summary: fmt.Sprintf("status.storedVersions lists %s, which %s serves; %s of the kind",
					v, notServedBy(a.from.api.Serves(r), a.from.label, a.to.label), plural(a.scan.objects[gr], "object", "objects")),
				Skewgate: "nothing: a custom resource's storage is the cluster's, whichever server answers",
				Evidence: []string{
					fmt.Sprintf("customresourcedefinition %s: status.storedVersions %v; spec.versions %s", crd.Metadata.Name,
						crd.Status.StoredVersions, strings.Join(versions, ", ")),
					fmt.Sprintf("%s (%s) does not serve %s", a.to.label, a.to.source, r),
				},
			}
			webhook := crd.Spec.Conversion != nil && crd.Spec.Conversion.Strategy == "Webhook"
			switch {
			case a.from.api.Serves(r):
				f.During = Verdict{Breaks, fmt.Sprintf("%s answer 404 for %s, which %s serve", servers(a.to), r, servers(a.from))}
				f.Skewgate = fmt.Sprintf("routes requests for %s to %s while they serve", r, servers(a.from))
			case webhook:
				f.During = Verdict{AtRisk, fmt.Sprintf("objects stored as %s are readable only through the conversion webhook %s: "+
					"while it is unavailable (its pods evicted as nodes drain) they cannot be read in any version", v, conversionTarget(&crd))}
			default:
				f.During = Verdict{Unaffected, fmt.Sprintf("objects stored as %s are converted to the requested version on every read", v)}
			}
			f.After = Verdict{AtRisk, fmt.Sprintf("%s cannot leave spec.versions while status.storedVersions lists it: the API server "+
				"refuses a CRD update that drops it (\"%s was previously a storage version, and must remain in spec.versions until a "+
				"storage migration ensures no data remains persisted in %s\"; knative/eventing#3931), so an upgrade of the CRD's "+
				"owner that drops it fails until every object is rewritten in %s and %s removed from status.storedVersions",
				v, v, v, crd.storageVersion(), v)}
			if webhook {
				f.Evidence = append(f.Evidence, "spec.conversion: Webhook, "+conversionTarget(&crd))
			}
			a.add(f)
		}
	}
}

// crdShadowFindings: CRD versions in a group version the target serves
// itself. An API server hands a request to the CRD handler only for group
// versions it does not serve, so there its built-in API answers instead.
func (a *analysis) crdShadowFindings(shadowed []shadowedVersion) {
	for _, sv := range shadowed {
		crd, r := sv.crd, sv.resource
		if !a.from.api.Serves(r.GroupVersionResource) {
			continue
		}
		gr := r.GroupResource()
		builtin := "no resource of that name"
		if native := a.to.api.resource(r.GroupVersionResource); native != nil {
			builtin = "its own " + native.Kind + " resource of the same name"
		}
		a.add(Finding{
			Kind:    KindCRDShadowed,
			Subject: "customresourcedefinition " + crd.Metadata.Name + " " + r.Version,
			Summary: fmt.Sprintf("%s serves %s itself; %s of the CRD", a.to.label, r.GroupVersion, plural(a.scan.objects[gr], "object", "objects")),
			During: Verdict{Breaks, fmt.Sprintf("requests for %s that land on %s reach their built-in %s (%s), not the CRD: "+
				"reads miss the CRD's objects and writes go elsewhere", r, servers(a.to), r.GroupVersion, builtin)},
			After:    Verdict{Breaks, fmt.Sprintf("the CRD's %s are not served in %s any more", gr, r.GroupVersion)},
			Skewgate: "nothing: both sides serve the path, differently",
			Evidence: []string{
				fmt.Sprintf("customresourcedefinition %s serves %s (spec.versions)", crd.Metadata.Name, r),
				fmt.Sprintf("%s (%s) serves %s itself, with %s", a.to.label, a.to.source, r.GroupVersion, builtin),
			},
		})
	}
}

// notServedBy names who does not serve a version: the target, or both sides.
func notServedBy(fromServes bool, from, to string) string {
	if fromServes {
		return to + " no longer"
	}
	return "neither " + from + " nor " + to
}

func conversionTarget(crd *customResourceDefinition) string {
	c := crd.Spec.Conversion
	switch {
	case c == nil || c.Webhook == nil:
		return "(no client configuration)"
	case c.Webhook.ClientConfig.Service != nil:
		return "service " + c.Webhook.ClientConfig.Service.Namespace + "/" + c.Webhook.ClientConfig.Service.Name
	}
	return "URL " + c.Webhook.ClientConfig.URL
}

// apiServiceFindings: APIServices an API server registers itself for a
// group version only one side serves. kube-aggregator's autoregister
// controller deletes, when its server starts, every such APIService (label
// automanaged=onstart) for a group version its server does not serve, and a
// server that has started does not re-create it.
func (a *analysis) apiServiceFindings() {
	for _, svc := range a.cfg.apiServices {
		if svc.Spec.Service != nil || svc.Metadata.Labels[autoRegisterLabel] != "onstart" {
			continue
		}
		gv := GroupVersion{svc.Spec.Group, svc.Spec.Version}
		fromServes, toServes := a.from.api.ServesGroupVersion(gv), a.to.api.ServesGroupVersion(gv)
		if fromServes == toServes {
			continue
		}
		has, lacks := a.sideOf(fromServes)
		starting := "the first " + lacks.label + " server to start"
		if lacks == a.from {
			starting = "a " + lacks.label + " server restarting during the upgrade"
		}
		a.add(Finding{
			Kind:    KindAPIService,
			Subject: "apiservice " + svc.Metadata.Name,
			Summary: fmt.Sprintf("registered by the API servers for %s, which only %s serves", gv, has.label),
			During: Verdict{Breaks, fmt.Sprintf("%s deletes this APIService (automanaged=onstart: kube-aggregator removes those of "+
				"group versions its server does not serve); from then on %s still serve %s but leave it out of /apis/%s, the "+
				"discovery document older clients and kubectl api-resources fall back to, until they restart (kubernetes/kubernetes#51912)",
				starting, servers(has), gv, gv.Group)},
			After:    Verdict{Unaffected, fmt.Sprintf("only %s register it", servers(has))},
			Skewgate: fmt.Sprintf("routes requests for %s's resources to %s; the group document each server serves still misses it", gv, servers(has)),
			Evidence: []string{
				fmt.Sprintf("apiservice %s: spec.group %s, spec.version %s, no spec.service (served by the API servers themselves), label %s=onstart",
					svc.Metadata.Name, gv.Group, gv.Version, autoRegisterLabel),
				fmt.Sprintf("%s (%s) serves %s; %s (%s) does not", has.label, has.source, gv, lacks.label, lacks.source),
			},
		})
	}
}

// admissionFindings: webhooks and admission policies whose rules guard a
// group resource on one side but leave a version of it unguarded on the
// other, and policies whose paramKind only one side serves.
func (a *analysis) admissionFindings() {
	for _, res := range sortedKeys(a.cfg.webhooks, compareGVR) {
		kind := a.kindName(res)
		for _, cfg := range a.cfg.webhooks[res] {
			for _, w := range cfg.Webhooks {
				subject := fmt.Sprintf("%s %s (webhook %s)", kind, cfg.Metadata.Name, w.Name)
				a.coverageFindings(subject, w.Rules, w.MatchPolicy)
			}
		}
	}
	for _, res := range sortedKeys(a.cfg.policies, compareGVR) {
		kind := a.kindName(res)
		for _, p := range a.cfg.policies[res] {
			if a.cfg.boundPolicies[res][p.Metadata.Name] == 0 {
				continue // API servers configure only bound policies
			}
			subject := kind + " " + p.Metadata.Name
			if mc := p.Spec.MatchConstraints; mc != nil {
				a.coverageFindings(subject, mc.ResourceRules, mc.MatchPolicy)
			}
			a.paramKindFinding(subject, &p, a.cfg.boundPolicies[res][p.Metadata.Name])
		}
	}
}

// kindName is the lower-case kind of a resource the current side serves, as
// kubectl names objects ("validatingadmissionpolicy skew-params").
func (a *analysis) kindName(r GroupVersionResource) string {
	if res := a.from.api.resource(r); res != nil && res.Kind != "" {
		return strings.ToLower(res.Kind)
	}
	return r.Resource
}

// coverageFindings compares, for every group resource the rules name, which
// of its served versions each side's API servers send to the webhook or
// policy. With matchPolicy Equivalent (the default) a server converts a
// request to a version the rules name, but only to versions it serves itself.
func (a *analysis) coverageFindings(subject string, rules []rule, matchPolicy string) {
	equivalent := matchPolicy != "Exact"
	covered := func(s *side, gr GroupResource) (servedVs, guarded []string) {
		servedVs = s.api.servedVersions(gr)
		for _, v := range servedVs {
			r := GroupVersionResource{GroupVersion{gr.Group, v}, gr.Resource}
			if slices.ContainsFunc(rules, func(rl rule) bool { return rl.matches(r) }) {
				guarded = append(guarded, v)
			}
		}
		if equivalent && len(guarded) > 0 {
			guarded = servedVs
		}
		return servedVs, guarded
	}
	for _, gr := range a.groupResources() {
		fromServed, fromGuarded := covered(a.from, gr)
		toServed, toGuarded := covered(a.to, gr)
		if len(fromGuarded) == 0 && len(toGuarded) == 0 {
			continue
		}
		for _, x := range []*side{a.to, a.from} {
			xServed, xGuarded, yServed, yGuarded := toServed, toGuarded, fromServed, fromGuarded
			y := a.from
			if x == a.from {
				xServed, xGuarded, yServed, yGuarded, y = fromServed, fromGuarded, toServed, toGuarded, a.to
			}
			if len(yGuarded) == 0 {
				continue
			}
			// Versions x serves unguarded, unless y serves them unguarded too:
			// a gap both sides share is no skew.
			var gaps []string
			for _, v := range xServed {
				if !slices.Contains(xGuarded, v) && !(slices.Contains(yServed, v) && !slices.Contains(yGuarded, v)) {
					gaps = append(gaps, v)
				}
			}
			if len(gaps) == 0 && !(len(xGuarded) == 0 && len(xServed) > 0) {
				continue
			}
			if len(gaps) == 0 {
				gaps = xServed
			}
			policy := "Equivalent"
			if !equivalent {
				policy = "Exact"
			}
			f := Finding{
				Kind:    KindAdmissionCoverage,
				Subject: subject,
				Summary: fmt.Sprintf("guards %s on %s, not through %s on %s", gr, y.label, joinVersions(gr.Group, gaps), x.label),
				During: Verdict{Breaks, fmt.Sprintf("%s admit %s through %s without it: its rules name %s, and matchPolicy %s converts "+
					"a request only to versions its server serves", servers(x), gr, joinVersions(gr.Group, gaps),
					joinVersions(gr.Group, yGuarded), policy)},
				Skewgate: "nothing: each server admits the requests it serves by its own reading of the rules",
				Evidence: []string{
					fmt.Sprintf("%s: rules %s, matchPolicy %s", subject, describeRules(rules), policy),
					served(a.from, gr), served(a.to, gr),
				},
			}
			if x == a.to {
				f.After = Verdict{Breaks, fmt.Sprintf("no request for %s through %s reaches it", gr, joinVersions(gr.Group, gaps))}
			} else {
				f.After = Verdict{Unaffected, fmt.Sprintf("%s guard every version they serve", servers(a.to))}
			}
			a.add(f)
		}
	}
}

func describeRules(rules []rule) string {
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = fmt.Sprintf("{apiGroups %v, apiVersions %v, resources %v}", r.APIGroups, r.APIVersions, r.Resources)
	}
	return strings.Join(out, ", ")
}

// paramKindFinding: a bound policy whose paramKind only one side serves. An
// API server that cannot resolve the paramKind has a configuration error
// for the policy: with failurePolicy Fail (the default) it denies every
// request the policy matches, with Ignore it skips the policy.
func (a *analysis) paramKindFinding(subject string, p *admissionPolicy, bindings int) {
	pk := p.Spec.ParamKind
	if pk == nil {
		return
	}
	gv, ok := parseAPIVersion(pk.APIVersion)
	if !ok {
		return
	}
	k := GroupVersionKind{gv, pk.Kind}
	fromServes, toServes := a.from.api.kind(k) != nil, a.to.api.kind(k) != nil
	if fromServes == toServes {
		return
	}
	has, lacks := a.sideOf(fromServes)
	effect := Verdict{Breaks, fmt.Sprintf("%s cannot resolve the paramKind and deny every request the policy matches "+
		"(\"failed to configure policy: failed to find resource referenced by paramKind\", failurePolicy Fail)", servers(lacks))}
	if p.Spec.FailurePolicy == "Ignore" {
		effect = Verdict{AtRisk, fmt.Sprintf("%s cannot resolve the paramKind and skip the policy (failurePolicy Ignore): "+
			"requests it matches are admitted unchecked there", servers(lacks))}
	}
	f := Finding{
		Kind:     KindAdmissionParams,
		Subject:  subject,
		Summary:  fmt.Sprintf("paramKind %s is served only by %s", k, has.label),
		During:   effect,
		Skewgate: "nothing: each server configures its own admission policies",
		Evidence: []string{
			fmt.Sprintf("%s: spec.paramKind apiVersion %s, kind %s; bound by %s", subject, pk.APIVersion, pk.Kind,
				plural(bindings, "binding", "bindings")),
			fmt.Sprintf("%s serves %s; %s (%s) does not", has.label, k, lacks.label, lacks.source),
		},
	}
	if lacks == a.to {
		f.After = effect
		f.After.Detail = strings.Replace(effect.Detail, servers(lacks), "all servers", 1)
	} else {
		f.After = Verdict{Unaffected, "every server serves the paramKind"}
	}
	a.add(f)
}

// fieldFindings: objects that hold fields one side's schema lacks, found in
// the sets of fields their managers own (metadata.managedFields). A server
// whose schema lacks a field drops it from every write it handles (or
// refuses the write under fieldValidation Strict, as kubectl sends), and a
// client that reads through it and writes back elsewhere clears it.
func (a *analysis) fieldFindings() {
	groups := map[fieldGroup][]fieldKey{}
	for k := range a.scan.fields {
		g := fieldGroup{k.resource, k.lacksTo}
		groups[g] = append(groups[g], k)
	}
	for _, g := range sortedKeys(groups, func(x, y fieldGroup) int {
		return cmp.Or(cmp.Compare(x.resource, y.resource), cmp.Compare(boolOrder(x.lacksTo), boolOrder(y.lacksTo)))
	}) {
		keys := groups[g]
		slices.SortFunc(keys, func(x, y fieldKey) int { return cmp.Compare(x.path, y.path) })
		lacks, has := a.from, a.to
		if g.lacksTo {
			lacks, has = a.to, a.from
		}
		r, _ := parseTableKey(g.resource)
		objects := a.scan.fieldObjects[g]
		var paths, evidence []string
		for _, k := range keys {
			u := a.scan.fields[k]
			paths = append(paths, k.path)
			managers := sortedKeys(u.managers, strings.Compare)
			evidence = append(evidence, fmt.Sprintf("%s set %s (metadata.managedFields of field managers %s), e.g. %s",
				plural(u.objects, "object", "objects"), k.path, strings.Join(quoteAll(managers), ", "), examples(u.examples)))
		}
		summary := paths[0]
		if len(paths) > 1 {
			summary += fmt.Sprintf(" and %d more", len(paths)-1)
		}
		f := Finding{
			Kind:    KindFields,
			Subject: r.String(),
			Summary: fmt.Sprintf("%s %s fields only %s's schema has: %s", plural(objects, "object", "objects"),
				map[bool]string{true: "sets", false: "set"}[objects == 1], has.label, summary),
			During: Verdict{Breaks, fmt.Sprintf("%s's schema lacks %s: a write through one of them drops the fields (or is refused "+
				"under fieldValidation Strict, as kubectl sends), and a read through one of them written back elsewhere clears them "+
				"(kubernetes/kubernetes#129511, #46073)", servers(lacks), strings.Join(paths, ", "))},
			Skewgate: fmt.Sprintf("sends writes of %s, and by default reads (--schema-skew-routing), to servers whose schema has every "+
				"field another server's has", r),
			Evidence: append([]string{fmt.Sprintf("%s: %s only in %s", a.skew.source, strings.Join(paths, ", "), has.label)}, evidence...),
		}
		if lacks == a.to {
			f.After = Verdict{Breaks, "no server's schema has them: the next write of each of these objects drops them"}
			f.Skewgate += "; after the upgrade no server has them"
		} else {
			f.After = Verdict{Unaffected, "every server's schema has them"}
		}
		a.add(f)
	}
}

func boolOrder(b bool) int {
	if b {
		return 1
	}
	return 0
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
