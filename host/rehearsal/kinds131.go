package rehearsal

import "fmt"

// Kinds131 are new in a 1.30 -> 1.31 upgrade, which adds no kind served by default: the
// upgraded servers' --runtime-config serves VolumeAttributesClass v1beta1 and LeaseCandidate
// v1alpha1, which 1.30 does not have.
var Kinds131 = NewKinds{
	OwnerAPIVersion: "storage.k8s.io/v1beta1",
	OwnerKind:       "VolumeAttributesClass",
	Owners: resource{
		collection: "/apis/storage.k8s.io/v1beta1/volumeattributesclasses",
		new:        true,
		object: func(name string) []byte {
			return fmt.Appendf(nil, `{"apiVersion":"storage.k8s.io/v1beta1","kind":"VolumeAttributesClass","metadata":{"name":%q},`+
				`"driverName":"rehearsal.skewgate.invalid","parameters":{"tier":"none"}}`, name)
		},
	},
	Namespaced: func(namespace string) resource {
		return resource{
			collection: "/apis/coordination.k8s.io/v1alpha1/namespaces/" + namespace + "/leasecandidates",
			new:        true,
			object: func(name string) []byte {
				return fmt.Appendf(nil, `{"apiVersion":"coordination.k8s.io/v1alpha1","kind":"LeaseCandidate","metadata":{"name":%q},`+
					`"spec":{"leaseName":"rehearsal","binaryVersion":"1.31.4","emulationVersion":"1.31.0","preferredStrategies":["OldestEmulationVersion"]}}`, name)
			},
		}
	},
	APIServerArgs: []string{"--runtime-config=storage.k8s.io/v1beta1=true,coordination.k8s.io/v1alpha1=true"},
	Discovery: [][2]string{
		{"storage.k8s.io/v1beta1", "volumeattributesclasses"},
		{"coordination.k8s.io/v1alpha1", "leasecandidates"},
	},
	// The 1.31 kubelet's list of Services (kubernetes/kubernetes#127316).
	FieldSelector: "spec.clusterIP!=None",
}
