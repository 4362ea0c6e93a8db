package discovery

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestQueryValueIsWhatNetURLReads(t *testing.T) {
	queries := []string{"", "hash=ABC", "hash=ABC&hash=DEF", "x=1&hash=ABC", "hash", "hash=", "hash=A%42C", "hash=A+B",
		"hash=%zz&hash=OK", "h%61sh=ABC", "hash;x=1&hash=ABC", "x=1;hash=ABC", "&&hash=ABC&", "hash=A=B", "%=1&hash=X", "hash=%4"}
	rng := rand.New(rand.NewPCG(20261201, 13))
	const alphabet = "hash=&;%+4A2x"
	for range 3000 {
		b := make([]byte, rng.IntN(14))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		queries = append(queries, string(b))
	}
	for _, q := range queries {
		values, _ := url.ParseQuery(q)
		if got, want := queryValue(q, "hash"), values.Get("hash"); got != want {
			t.Errorf("query %q: hash %q; net/url reads %q", q, got, want)
		}
	}
}

func TestIfNoneMatchIsWhatServeContentAnswers(t *testing.T) {
	const etag = `"ABC"`
	for _, header := range []string{"", `"ABC"`, `W/"ABC"`, `"X", "ABC"`, `"X","ABC"`, `*`, `"X"`, `ABC`, ` "ABC" `, `"ab c"`, `"X", W/"ABC"`} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/openapi/v3", nil)
		if header != "" {
			req.Header.Set("If-None-Match", header)
		}
		rec.Header().Set("Etag", etag)
		http.ServeContent(rec, req, "", time.Time{}, strings.NewReader("{}"))
		if got, want := ifNoneMatchMatches(header, etag), rec.Code == http.StatusNotModified; got != want {
			t.Errorf("If-None-Match %q: match %v; net/http answers %d", header, got, rec.Code)
		}
	}
}

func TestCompareVersionsOrdersGitVersions(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"v1.36.3", "v1.35.4", 1}, {"v1.36.3", "v1.36.3", 0}, {"v1.9.0", "v1.10.0", -1},
		{"v1.36.0-rc.1+abc", "v1.36.0", 0}, {"v1.36.3", "garbage", 1}, {"1.36.3", "v0.0.1", -1}, {"v1.36", "v1.0.1", -1},
	} {
		if got := compareVersions(c.a, c.b); got != c.want {
			t.Errorf("compareVersions(%q, %q) = %d; want %d", c.a, c.b, got, c.want)
		}
	}
}
