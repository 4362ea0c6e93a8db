package discovery

import (
	"net/url"
	"testing"
)

func checkSplitRequestTargetAgainstNetURL(t *testing.T, target string) {
	t.Helper()
	path, rawQuery, ok := SplitRequestTarget(target)
	u, err := url.ParseRequestURI(target)
	if err != nil {
		if ok && len(target) > 0 && target[0] == '/' {
			// net/url rejects some targets for reasons other than escapes
			// (control characters); only a malformed escape must agree.
			if _, perr := url.PathUnescape(path); perr == nil {
				return
			}
		}
		if ok {
			t.Errorf("%q: accepted as (%q, %q); net/url rejects it: %v", target, path, rawQuery, err)
		}
		return
	}
	if !ok || path != u.Path || rawQuery != u.RawQuery {
		t.Errorf("%q: got (%q, %q, %v); net/url gives (%q, %q)", target, path, rawQuery, ok, u.Path, u.RawQuery)
	}
}

func TestSplitRequestTargetMatchesGoHTTPServer(t *testing.T) {
	for _, target := range []string{
		"/apis", "/apis?x=1", "/api/v1/namespaces/a%2Fb/pods", "/api/v1/namespaces/%61/pods?watch=1&x=%20",
		"/apis/apps/v1/deployments/%E2%9C%93", "/p%", "/p%4", "/p%zz", "/a+b", "/a%2b", "/?", "/a?b?c", "/%2F%2f",
	} {
		checkSplitRequestTargetAgainstNetURL(t, target)
	}
}

func TestSplitRequestTargetDoesNotAllocateWithoutEscapes(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() {
		SplitRequestTarget("/apis/apps/v1/namespaces/default/deployments?watch=true")
	}); n != 0 {
		t.Errorf("%v allocations; want 0", n)
	}
}

func FuzzSplitRequestTarget(f *testing.F) {
	for _, s := range []string{"/apis", "/a%2Fb?c=%", "/%zz", "/%E2%9C%93?x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rest string) {
		checkSplitRequestTargetAgainstNetURL(t, "/"+rest)
	})
}
