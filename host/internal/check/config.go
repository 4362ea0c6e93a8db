package check

import (
	"context"
	"slices"
)

// The API configuration objects the check reads whole, decoded into the few
// fields it uses: bin/skewgate links no Kubernetes API type packages.

type objectName struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// customResourceDefinition is an apiextensions.k8s.io/v1 CustomResourceDefinition.
type customResourceDefinition struct {
	Metadata objectName `json:"metadata"`
	Spec     struct {
		Group string `json:"group"`
		Names struct {
			Plural string `json:"plural"`
			Kind   string `json:"kind"`
		} `json:"names"`
		Scope    string `json:"scope"`
		Versions []struct {
			Name    string `json:"name"`
			Served  bool   `json:"served"`
			Storage bool   `json:"storage"`
		} `json:"versions"`
		Conversion *struct {
			Strategy string `json:"strategy"`
			Webhook  *struct {
				ClientConfig struct {
					URL     string `json:"url"`
					Service *struct {
						Namespace string `json:"namespace"`
						Name      string `json:"name"`
					} `json:"service"`
				} `json:"clientConfig"`
			} `json:"webhook"`
		} `json:"conversion"`
	} `json:"spec"`
	Status struct {
		StoredVersions []string `json:"storedVersions"`
	} `json:"status"`
}

// servedVersions are the versions the CRD itself serves.
func (c *customResourceDefinition) servedVersions() []string {
	var out []string
	for _, v := range c.Spec.Versions {
		if v.Served {
			out = append(out, v.Name)
		}
	}
	return out
}

func (c *customResourceDefinition) storageVersion() string {
	for _, v := range c.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

// resources are the resources the CRD's handler serves, as discovery would
// list them.
func (c *customResourceDefinition) resources() []*Resource {
	var out []*Resource
	for _, v := range c.servedVersions() {
		out = append(out, &Resource{
			GroupVersionResource: GroupVersionResource{GroupVersion{c.Spec.Group, v}, c.Spec.Names.Plural},
			Kind:                 c.Spec.Names.Kind,
			Namespaced:           c.Spec.Scope == "Namespaced",
			Verbs:                []string{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"},
		})
	}
	return out
}

// apiService is an apiregistration.k8s.io/v1 APIService.
type apiService struct {
	Metadata objectName `json:"metadata"`
	Spec     struct {
		Group   string `json:"group"`
		Version string `json:"version"`
		Service *struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"service"`
	} `json:"spec"`
}

// autoRegisterLabel is kube-aggregator's label on the APIServices an API
// server registers itself: "onstart" for its built-in group versions, "true"
// for those of CRDs.
const autoRegisterLabel = "kube-aggregator.kubernetes.io/automanaged"

// rule is an admissionregistration RuleWithOperations or NamedRuleWithOperations.
type rule struct {
	APIGroups   []string `json:"apiGroups"`
	APIVersions []string `json:"apiVersions"`
	Resources   []string `json:"resources"`
}

// matches reports whether the rule names the top-level resource r ("*" and
// "*/*" name every resource; "x/*" only x's subresources).
func (rl *rule) matches(r GroupVersionResource) bool {
	return matchesName(rl.APIGroups, r.Group) && matchesName(rl.APIVersions, r.Version) &&
		(matchesName(rl.Resources, r.Resource) || slices.Contains(rl.Resources, "*/*"))
}

func matchesName(names []string, name string) bool {
	return slices.Contains(names, "*") || slices.Contains(names, name)
}

// webhookConfiguration is an admissionregistration.k8s.io/v1
// Validating- or MutatingWebhookConfiguration.
type webhookConfiguration struct {
	Metadata objectName `json:"metadata"`
	Webhooks []struct {
		Name          string `json:"name"`
		Rules         []rule `json:"rules"`
		MatchPolicy   string `json:"matchPolicy"`
		FailurePolicy string `json:"failurePolicy"`
	} `json:"webhooks"`
}

// admissionPolicy is an admissionregistration.k8s.io Validating- or
// MutatingAdmissionPolicy.
type admissionPolicy struct {
	Metadata objectName `json:"metadata"`
	Spec     struct {
		ParamKind *struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		} `json:"paramKind"`
		MatchConstraints *struct {
			ResourceRules []rule `json:"resourceRules"`
			MatchPolicy   string `json:"matchPolicy"`
		} `json:"matchConstraints"`
		FailurePolicy string `json:"failurePolicy"`
	} `json:"spec"`
}

// admissionPolicyBinding is a policy binding: only the policy it binds
// matters here (an API server configures only bound policies).
type admissionPolicyBinding struct {
	Spec struct {
		PolicyName string `json:"policyName"`
	} `json:"spec"`
}

// configuration is every API configuration object of the current cluster the
// check reads.
type configuration struct {
	crds        []customResourceDefinition
	apiServices []apiService
	// webhooks and policies are keyed by the resource they were listed from,
	// which names their kind in findings.
	webhooks map[GroupVersionResource][]webhookConfiguration
	policies map[GroupVersionResource][]admissionPolicy
	// boundPolicies counts the bindings of each policy, by the policies'
	// resource and name.
	boundPolicies map[GroupVersionResource]map[string]int
}

// Where the configuration objects live; each is read only when the side
// serves it.
var (
	crdResource        = GroupVersionResource{GroupVersion{"apiextensions.k8s.io", "v1"}, "customresourcedefinitions"}
	apiServiceResource = GroupVersionResource{GroupVersion{"apiregistration.k8s.io", "v1"}, "apiservices"}
	webhookResources   = []GroupVersionResource{
		{GroupVersion{"admissionregistration.k8s.io", "v1"}, "validatingwebhookconfigurations"},
		{GroupVersion{"admissionregistration.k8s.io", "v1"}, "mutatingwebhookconfigurations"},
	}
	// policyResources pairs each policy resource with its bindings', in
	// every version an API server may serve them.
	policyResources = []struct{ policies, bindings GroupVersionResource }{
		{policyGVR("v1", "validatingadmissionpolicies"), policyGVR("v1", "validatingadmissionpolicybindings")},
		{policyGVR("v1", "mutatingadmissionpolicies"), policyGVR("v1", "mutatingadmissionpolicybindings")},
		{policyGVR("v1beta1", "mutatingadmissionpolicies"), policyGVR("v1beta1", "mutatingadmissionpolicybindings")},
		{policyGVR("v1alpha1", "mutatingadmissionpolicies"), policyGVR("v1alpha1", "mutatingadmissionpolicybindings")},
	}
)

func policyGVR(version, resource string) GroupVersionResource {
	return GroupVersionResource{GroupVersion{"admissionregistration.k8s.io", version}, resource}
}

// readConfiguration lists the configuration objects the current side serves.
// Policies served in several versions are the same objects: only the first
// served version is read.
func readConfiguration(ctx context.Context, c *client, api *API, pageSize int) (*configuration, error) {
	cfg := &configuration{
		webhooks:      map[GroupVersionResource][]webhookConfiguration{},
		policies:      map[GroupVersionResource][]admissionPolicy{},
		boundPolicies: map[GroupVersionResource]map[string]int{},
	}
	var err error
	if api.Serves(crdResource) {
		if cfg.crds, err = listItems[customResourceDefinition](ctx, c, crdResource.path(), pageSize, "listing "+crdResource.String()); err != nil {
			return nil, err
		}
	}
	if api.Serves(apiServiceResource) {
		if cfg.apiServices, err = listItems[apiService](ctx, c, apiServiceResource.path(), pageSize, "listing "+apiServiceResource.String()); err != nil {
			return nil, err
		}
	}
	for _, r := range webhookResources {
		if !api.Serves(r) {
			continue
		}
		if cfg.webhooks[r], err = listItems[webhookConfiguration](ctx, c, r.path(), pageSize, "listing "+r.String()); err != nil {
			return nil, err
		}
	}
	read := map[GroupResource]bool{}
	for _, p := range policyResources {
		if !api.Serves(p.policies) || !api.Serves(p.bindings) || read[p.policies.GroupResource()] {
			continue
		}
		read[p.policies.GroupResource()] = true
		if cfg.policies[p.policies], err = listItems[admissionPolicy](ctx, c, p.policies.path(), pageSize, "listing "+p.policies.String()); err != nil {
			return nil, err
		}
		bindings, err := listItems[admissionPolicyBinding](ctx, c, p.bindings.path(), pageSize, "listing "+p.bindings.String())
		if err != nil {
			return nil, err
		}
		counts := map[string]int{}
		for _, b := range bindings {
			counts[b.Spec.PolicyName]++
		}
		cfg.boundPolicies[p.policies] = counts
	}
	return cfg, nil
}
