package discovery

import "strings"

// Parts returns the path segments from the resource onwards
// ({resource}/{name}/{subresource}/...), as upstream's RequestInfo.Parts; it is
// nil for non-resource requests and when parsing failed. Nothing routes on
// them; the tests compare them with upstream's.
func (r *RequestInfo) Parts() []string {
	if r.partsPath == "" {
		return nil
	}
	return strings.Split(r.partsPath, "/")
}
