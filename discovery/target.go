package discovery

import "strings"

// SplitRequestTarget splits an origin-form request target ("/path?query", as in
// Envoy's :path header) into the decoded path and the raw query, the way Go's
// HTTP server fills url.URL.Path and RawQuery, which is what kube-apiserver
// classifies. ok is false for a malformed percent-escape, which the API server
// would reject with 400 itself. It allocates only when the path contains escapes.
func SplitRequestTarget(target string) (path, rawQuery string, ok bool) {
	path, rawQuery, _ = strings.Cut(target, "?")
	if strings.IndexByte(path, '%') < 0 {
		return path, rawQuery, true
	}
	buf := make([]byte, 0, len(path))
	for i := 0; i < len(path); i++ {
		if path[i] != '%' {
			buf = append(buf, path[i])
			continue
		}
		if i+2 >= len(path) || unhexDigit(path[i+1]) < 0 || unhexDigit(path[i+2]) < 0 {
			return "", "", false
		}
		buf = append(buf, byte(unhexDigit(path[i+1])<<4|unhexDigit(path[i+2])))
		i += 2
	}
	return string(buf), rawQuery, true
}

// queryUnescape decodes '+' and %XX as url.QueryUnescape does; it allocates
// only when there is something to decode.
func queryUnescape(s string) (string, bool) {
	if strings.IndexAny(s, "%+") < 0 {
		return s, true
	}
	buf := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			buf = append(buf, ' ')
		case c != '%':
			buf = append(buf, c)
		case i+2 >= len(s) || unhexDigit(s[i+1]) < 0 || unhexDigit(s[i+2]) < 0:
			return "", false
		default:
			buf = append(buf, byte(unhexDigit(s[i+1])<<4|unhexDigit(s[i+2])))
			i += 2
		}
	}
	return string(buf), true
}

func unhexDigit(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
