package rehearsal

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// The workloads of a rehearsal, all through the control-plane endpoint as users' clients send
// them: owners of a kind only the new version serves, each with dependents of a common kind; a
// namespace holding objects of a new kind, deleted mid-upgrade.
const (
	owners             = 10
	dependentsPerOwner = 2
	namespacedObjects  = 10

	loadNamespace      = "rehearsal-load"
	dependentNamespace = "rehearsal-gc"
	deletedNamespace   = "rehearsal-deleted"
	podNamespace       = "rehearsal-pods"

	// createRetryPause is how long a workload waits before creating again what failed: a
	// controller's retry.
	createRetryPause = 200 * time.Millisecond
)

// configMaps is the common kind of the load and of the dependents.
func configMaps(namespace string) resource {
	return resource{
		collection: "/api/v1/namespaces/" + namespace + "/configmaps",
		object: func(name string) []byte {
			return fmt.Appendf(nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q},"data":{"written-by":"rehearsal"}}`, name)
		},
	}
}

var namespaces = resource{
	collection: "/api/v1/namespaces",
	object: func(name string) []byte {
		return fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":%q}}`, name)
	},
}

// NewKinds are the kinds of a rehearsal that only the upgraded servers serve: a cluster-scoped
// kind whose objects own dependents, and a namespaced kind whose objects are in the namespace
// deleted mid-upgrade.
type NewKinds struct {
	// OwnerAPIVersion and OwnerKind name the owners in their dependents' ownerReferences.
	OwnerAPIVersion, OwnerKind string
	Owners                     resource
	Namespaced                 func(namespace string) resource
	// APIServerArgs are the upgraded servers' extra arguments that serve the new kinds, given
	// to them by a kubeadm patch.
	APIServerArgs []string
	// Discovery names each new kind's group version and resource, for the wait until the first
	// upgraded server serves them.
	Discovery [][2]string
	// FieldSelector, if set, is a field selector only the new servers accept on Services, which
	// the load lists with from the moment the first upgraded server serves it, as the new
	// kubelets do.
	FieldSelector string
}

// Kinds136 are new in a 1.35 -> 1.36 upgrade: MutatingAdmissionPolicy is served from 1.36 on
// (GA), by no 1.35 server by default; LeaseCandidate v1alpha2 is served by the upgraded servers
// only, whose --runtime-config enables it.
var Kinds136 = NewKinds{
	OwnerAPIVersion: "admissionregistration.k8s.io/v1",
	OwnerKind:       "MutatingAdmissionPolicy",
	Owners: resource{
		collection: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
		new:        true,
		object: func(name string) []byte {
			return fmt.Appendf(nil, `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingAdmissionPolicy",`+
				`"metadata":{"name":%q},"spec":{"failurePolicy":"Ignore","reinvocationPolicy":"Never",`+
				`"matchConstraints":{"resourceRules":[{"apiGroups":["rehearsal.skewgate.invalid"],"apiVersions":["v1"],"operations":["CREATE"],"resources":["nothings"]}]},`+
				`"mutations":[{"patchType":"ApplyConfiguration","applyConfiguration":{"expression":"Object{}"}}]}}`, name)
		},
	},
	Namespaced: func(namespace string) resource {
		return resource{
			collection: "/apis/coordination.k8s.io/v1alpha2/namespaces/" + namespace + "/leasecandidates",
			new:        true,
			object: func(name string) []byte {
				return fmt.Appendf(nil, `{"apiVersion":"coordination.k8s.io/v1alpha2","kind":"LeaseCandidate","metadata":{"name":%q},`+
					`"spec":{"leaseName":"rehearsal","binaryVersion":"1.36.3","emulationVersion":"1.36.0","strategy":"OldestEmulationVersion"}}`, name)
			},
		}
	},
	APIServerArgs: []string{"--runtime-config=coordination.k8s.io/v1alpha2=true"},
	Discovery: [][2]string{
		{"admissionregistration.k8s.io/v1", "mutatingadmissionpolicies"},
		{"coordination.k8s.io/v1alpha2", "leasecandidates"},
	},
}

// create creates an object through the endpoint, retrying what fails as a controller would,
// and returns the created object's UID. A 422 or 409 ends it: the workload itself is wrong.
func (c *endpointClient) create(ctx context.Context, r resource, body []byte) (string, error) {
	for {
		a := c.do(ctx, r, http.MethodPost, r.collection, body)
		switch {
		case a.status == http.StatusCreated:
			var obj struct {
				Metadata struct {
					UID string `json:"uid"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(a.body, &obj); err != nil {
				return "", err
			}
			return obj.Metadata.UID, nil
		case a.status == http.StatusUnprocessableEntity || a.status == http.StatusConflict:
			return "", fmt.Errorf("creating in %s: %d %s", r.collection, a.status, a.body)
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		sleep(ctx, createRetryPause)
	}
}

// createOwnersAndDependents creates the owners of the new kind and their dependents, and returns
// how many dependents it created.
func (c *endpointClient) createOwnersAndDependents(ctx context.Context, k NewKinds) (int, error) {
	created := 0
	for i := range owners {
		name := fmt.Sprintf("rehearsal-owner-%d", i)
		uid, err := c.create(ctx, k.Owners, k.Owners.object(name))
		if err != nil {
			return created, err
		}
		for j := range dependentsPerOwner {
			body := fmt.Appendf(nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dependent-%d-%d",`+
				`"ownerReferences":[{"apiVersion":%q,"kind":%q,"name":%q,"uid":%q}]}}`,
				i, j, k.OwnerAPIVersion, k.OwnerKind, name, uid)
			if _, err := c.create(ctx, configMaps(dependentNamespace), body); err != nil {
				return created, err
			}
			created++
		}
	}
	return created, nil
}

// fillAndDeleteNamespace creates objects of the namespaced new kind in deletedNamespace, then
// deletes the namespace, and returns how many objects it held.
func (c *endpointClient) fillAndDeleteNamespace(ctx context.Context, k NewKinds) (int, error) {
	r := k.Namespaced(deletedNamespace)
	for i := range namespacedObjects {
		if _, err := c.create(ctx, r, r.object(fmt.Sprintf("candidate-%d", i))); err != nil {
			return i, err
		}
	}
	for {
		a := c.do(ctx, namespaces, http.MethodDelete, namespaces.collection+"/"+deletedNamespace, nil)
		if a.status == http.StatusOK || a.status == http.StatusAccepted {
			return namespacedObjects, nil
		}
		if ctx.Err() != nil {
			return namespacedObjects, ctx.Err()
		}
		sleep(ctx, createRetryPause)
	}
}

// newKindWorkloads runs, once the first upgraded server serves the new kinds, everything that
// uses them: their share of the client load and watches, the owners and dependents, the
// namespace deletion. It returns once the owners exist and the namespace deletion was asked for;
// the load goes on until ctx ends.
func (c *endpointClient) newKindWorkloads(ctx, loadCtx context.Context, wg *sync.WaitGroup, k NewKinds, counts *Counts) error {
	c.runLoad(loadCtx, wg, "load-new", k.Owners, k.Namespaced(loadNamespace))
	c.watch(loadCtx, wg, k.Owners)
	if k.FieldSelector != "" {
		services := resource{collection: "/api/v1/namespaces/" + loadNamespace + "/services", new: true}
		wg.Go(func() {
			for loadCtx.Err() == nil {
				c.do(loadCtx, services, http.MethodGet, services.collection+"?fieldSelector="+url.QueryEscape(k.FieldSelector), nil)
				sleep(loadCtx, loadPause)
			}
		})
	}
	var err error
	if counts.DependentsCreated, err = c.createOwnersAndDependents(ctx, k); err != nil {
		return err
	}
	counts.ObjectsInDeletedNamespace, err = c.fillAndDeleteNamespace(ctx, k)
	return err
}
