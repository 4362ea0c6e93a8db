// Package discovery is skewgate's pure decision core: it classifies Kubernetes API
// requests, indexes which API server serves which group/version/resource, decides
// where a request must go during a version skew, and merges every server's own
// aggregated discovery into the one document upstream's peer-aggregated discovery
// (KEP-4020) would serve.
//
// The package is compiled into the proxy-wasm plugin, so outside tests it depends
// only on the standard library, and the request path
// (ParseRequestInfo, NegotiateDiscovery, Index.Decide) does not allocate.
//
// # Snapshot format
//
// The controller pushes a Snapshot as JSON. This package owns the format: every
// writer assembles a snapshot with NewSnapshot, which checks it (Validate), and
// encodes it with AppendJSON; ParseSnapshot reads it, and parsing the encoding
// of a snapshot gives the snapshot back. The members of each object are listed
// once, in snapshotMembers and serverMembers (snapshot.go), which both the
// reader and the writer walk. Every field is required unless noted.
//
//	{
//	  "schemaVersion": "1.0",               // optional (absent: 1.0): the schema version written for
//	  "requiresSchemaVersion": "1.0",       // optional: the oldest reader version that may read it
//	  "generation": 42,                     // > 0; a new snapshot carries a higher number
//	  "preferred": "apiserver-7x5ezbbh7ckzrcmfarikojwuzq", // optional: the id of the server that
//	                                        // takes every request it can serve (node-local mode)
//	  "servers": [                          // 1 to 64 servers
//	    {
//	      "id": "apiserver-7x5ezbbh7ckzrcmfarikojwuzq", // upstream server ID (identity lease name) when
//	                                        // known, otherwise any stable unique name
//	      "cluster": "apiserver-a",         // the gateway's upstream (Envoy cluster) for this server; no '+' (see FrontProxyClusterSuffix)
//	      "version": "v1.36.3",             // the server's gitVersion from /version
//	      "healthy": true,                  // /readyz answered 200 on the last probe
//	      "draining": true,                 // optional (1.2; absent: false): about to be stopped, its
//	                                        // node cordoned; other capable servers are preferred
//	      "apis": { APIGroupDiscoveryList },// the server's own GET /apis, Accept ...;profile=nopeer
//	      "api":  { APIGroupDiscoveryList },// the server's own GET /api, same Accept
//	      "openapiV3": {"apis/apps/v1": "<hash>", ...}, // optional: the server's GET /openapi/v3
//	      "fieldSelectors": {"v1/services": ["metadata.name", ...], ...}, // optional (1.1): per resource,
//	                                        // the field-selector labels the server accepts, sorted
//	      "missingFields": {"apps/v1/deployments": ["spec.x", ...], ...}  // optional (1.1): per resource,
//	                                        // field paths other servers' schemas have and this one's lacks
//	    }
//	  ],
//	  "fieldSkew": {                        // optional (1.3): per resource whose schemas differ
//	    "apps/v1/deployments": {
//	      "paths": ["spec.template.spec.volumes[].image", ...], // 1 to MaxSkewPaths field paths, sorted
//	      "schemas": [                      // one per schema the servers have of the resource
//	        {"servers": [0, 2], "knows": []}, // indexes of servers, sorted; a server in one schema at most
//	        {"servers": [1], "knows": [0]}  // indexes of the paths this schema has, sorted
//	      ]
//	    }
//	  }
//	}
//
// "apis" and "api" are the apidiscovery.k8s.io/v2 documents exactly as the server
// served them (kind, apiVersion and metadata at list level are accepted and
// ignored; a list parsed from a document is written as that document);
// "openapiV3" is the index of the server's OpenAPI v3 documents, each path with
// the hash of its serverRelativeURL ("/openapi/v3/<path>?hash=<hash>").
//
// "fieldSelectors" and "missingFields" name a resource as
// "<group>/<version>/<resource>", for the core group "<version>/<resource>"
// ("v1/services"; ResourceKey), never a subresource, and only resources the
// server serves. "fieldSelectors" is there for resources whose label sets
// differ between the snapshot's servers, or (the controller's choice) may
// differ once an unhealthy server is back, and then every server that serves
// the resource lists it: a label no server lists is accepted by none.
// "missingFields" lists at most MaxMissingFields dotted paths per resource:
// evidence, since routing only needs to know that the server lacks some.
//
// "fieldSkew" names resources the same way, each one that some server
// serves, and tells which servers' schemas have each field path that
// differs, so that a write goes to the servers whose schema has every field
// its body sets (FieldSkew). Paths are spelled as in "missingFields": names
// joined by '.', "[]" after an array's name for its items, "*" for a map's
// values. A path is listed when some compared server's schema has it and
// another's lacks it, unless exactly the servers whose schema has its parent
// path (every compared server for a property of the root) have it: its
// parent then says where it is. The servers compared are grouped by schema;
// a server that serves the resource but is in no schema was not compared
// (down, or its schema unknown) and counts as knowing none of the paths. A
// resource of more than MaxSkewPaths such paths is left out, and is routed
// by "missingFields" alone, as every resource is by a reader of 1.2, which
// ignores "fieldSkew".
//
// Without any of these members a snapshot has no field-level knowledge and
// routes as one of schema 1.0.
// fixtures/snapshot-example.json is a complete example.
//
// # Schema versions
//
// The snapshot and the plugin configuration that carries it are the contract
// between the controller and the plugin module, which are upgraded
// separately; schema.go states the rules. In short: a minor version only adds
// optional members; a reader of the same major version ignores the members of
// a newer minor it does not know (listing them in Snapshot.Ignored) and
// refuses unknown members of its own or an older minor; a document of another
// major version, or one whose requiresSchemaVersion is newer than the reader,
// is refused with a *SchemaError. A writer always writes its own version.
//
// ParseSnapshot rejects malformed input with an error that names the server and
// the field; it never panics. Callers keep their previous snapshot on error.
package discovery
