package discovery

import (
	"fmt"
	"strings"
	"unsafe"
)

// MaxInspectedBody is the largest write body the plugin reads to route by
// the fields it sets: Envoy's default buffer limit per connection (1 MiB),
// past which Envoy answers a buffered request 413. kube-apiserver takes
// bodies of up to 3 MiB, but an object stored in etcd is at most 1.5 MiB and
// few writes come near 1 MiB; a larger one is routed as an unreadable body.
const MaxInspectedBody = 1 << 20

// BodyUse tells what a decision made of the request body.
type BodyUse uint8

const (
	// BodyNotConsulted: the decision does not depend on the body.
	BodyNotConsulted BodyUse = iota
	// BodyRead: the body was read and the servers narrowed to those whose
	// schema has every field it sets.
	BodyRead
	// BodyUnreadable: the decision depends on the body but it was not read:
	// a media type the plugin does not read (protobuf, CBOR, YAML that is
	// not JSON), a body larger than MaxInspectedBody or of unknown length,
	// one that is not what its media type says, or one that was not offered.
	BodyUnreadable
)

var bodyUseNames = [...]string{"NotConsulted", "Read", "Unreadable"}

func (u BodyUse) String() string {
	if int(u) < len(bodyUseNames) {
		return bodyUseNames[u]
	}
	return fmt.Sprintf("BodyUse(%d)", u)
}

// bodyFormat is how a write's body says which fields it sets.
type bodyFormat uint8

const (
	// unreadableBody is any media type below that the plugin cannot read.
	unreadableBody bodyFormat = iota
	// objectBody is an object, or a patch shaped like one: a create or an
	// update (application/json), a JSON merge patch, a strategic merge
	// patch, and a server-side apply sent as JSON (the apply media type is
	// YAML, of which JSON is a part; kubectl and client-go send JSON).
	objectBody
	// jsonPatchBody is an RFC 6902 JSON patch: an array of operations.
	jsonPatchBody
)

// bodyFormatOf reads a Content-Type value.
func bodyFormatOf(contentType string) bodyFormat {
	media, _, _ := strings.Cut(contentType, ";")
	media = strings.TrimSpace(media)
	switch {
	case strings.EqualFold(media, "application/json"),
		strings.EqualFold(media, "application/merge-patch+json"),
		strings.EqualFold(media, "application/strategic-merge-patch+json"),
		strings.EqualFold(media, "application/apply-patch+yaml"):
		return objectBody
	case strings.EqualFold(media, "application/json-patch+json"):
		return jsonPatchBody
	}
	return unreadableBody
}

// bodySetsFields reports whether a request's body can set fields of the
// resource's object: a create, update or patch of the object or of its
// status, which both carry the whole object. Other subresources (scale,
// eviction, binding) carry other kinds.
func bodySetsFields(method string, info *RequestInfo) bool {
	switch method {
	case "POST", "PUT", "PATCH":
	default:
		return false
	}
	return info.Subresource == "" || info.Subresource == "status"
}

// bodyReadable reports whether the plugin reads req's body, given that its
// fields matter: a media type it reads, and a body, or before it is read a
// declared length, of at most MaxInspectedBody.
func bodyReadable(req *Request) bool {
	size := req.ContentLength
	if req.Body != nil {
		size = int64(len(req.Body))
	}
	return size > 0 && size <= MaxInspectedBody && bodyFormatOf(req.ContentType) != unreadableBody
}

// knowingEveryField is the set of servers whose schema has every field path
// of the tree that body sets; ok is false when body is not what its format
// says. Servers that were not compared know no path.
func (t *skewTree) knowingEveryField(body []byte, format bodyFormat) (knowing ServerSet, ok bool) {
	// Read in place: the body is not written while it is read, and nothing
	// read from it outlives this call. A copy of 1 MiB cost more than the
	// reading.
	text := unsafe.String(unsafe.SliceData(body), len(body))
	if !validJSON(text) {
		return 0, false
	}
	doc := topLevel(text)
	knowing = ^ServerSet(0)
	var stack []walkFrame
	switch {
	case format == objectBody && doc.IsObject():
		t.walk(doc, 0, &knowing, stack)
	case format == jsonPatchBody && doc.IsArray():
		for ops := doc.Members(); ops.Next(); {
			op := ops.Value()
			if !op.IsObject() {
				return 0, false
			}
			node := t.setAlong(op.Get("path"), &knowing)
			switch kind := op.Get("op").Str(); {
			case kind == "move":
				// The source is removed: a field a schema lacks cannot be.
				t.setAlong(op.Get("from"), &knowing)
			case node != noNode && (kind == "add" || kind == "replace" || kind == "test"):
				stack = t.walk(op.Get("value"), node, &knowing, stack)
			}
		}
	default:
		return 0, false
	}
	if knowing != ^ServerSet(0) {
		knowing &= t.compared
	}
	return knowing, true
}

// walkFrame is an object or array the walk is in, at a node of the tree.
type walkFrame struct {
	node   int32
	object bool
}

// walk narrows knowing by every path of the tree that v, at node, sets,
// reading v once: it enters the objects and arrays a path leads into,
// keeping them on a stack of its own at most as deep as the tree, and skips
// the rest. Its call depth is the same for any body (Envoy's WAMR runtime
// gives a plugin 32 KiB of stack). v is valid JSON.
func (t *skewTree) walk(v JSONValue, node int32, knowing *ServerSet, stack []walkFrame) []walkFrame {
	s := v.raw
	if len(t.nodes[node].children) == 0 || !(v.IsObject() || v.IsArray()) {
		return stack
	}
	stack = append(stack[:0], walkFrame{node, s[0] == '{'})
	for i := 1; len(stack) > 0; {
		top := stack[len(stack)-1]
		if i = skipSpace(s, i); s[i] == ',' {
			i = skipSpace(s, i+1)
		}
		if s[i] == '}' || s[i] == ']' {
			stack = stack[:len(stack)-1]
			i++
			continue
		}
		var child int32
		if top.object {
			end := skipString(s, i)
			child = t.memberChild(top.node, JSONValue{s[i:end]})
			i = skipSpace(s, skipSpace(s, end)+1) // past the colon
		} else {
			child = t.exactChild(top.node, itemsStep)
		}
		if child != noNode {
			*knowing &= t.nodes[child].knowing
			if len(t.nodes[child].children) > 0 && (s[i] == '{' || s[i] == '[') {
				stack = append(stack, walkFrame{child, s[i] == '{'})
				i++
				continue
			}
		}
		i = skipValue(s, i)
	}
	return stack
}

// setAlong narrows knowing by every path of the tree that a JSON pointer (a
// JSON patch operation's path) passes through or ends at, and returns the
// node it ends at, noNode when it leaves the tree. An index or "-" steps
// into an array's items.
func (t *skewTree) setAlong(pointer JSONValue, knowing *ServerSet) int32 {
	if !pointer.IsString() {
		return noNode
	}
	p := pointer.Str()
	if p == "" {
		return 0
	}
	if p[0] != '/' {
		return noNode
	}
	node := int32(0)
	for rest, more := p[1:], true; more; {
		var token string
		token, rest, more = strings.Cut(rest, "/")
		if strings.IndexByte(token, '~') >= 0 {
			token = strings.ReplaceAll(strings.ReplaceAll(token, "~1", "/"), "~0", "~")
		}
		child := int32(noNode)
		if arrayIndex(token) {
			child = t.exactChild(node, itemsStep)
		}
		if child == noNode {
			child = t.exactChild(node, token)
		}
		if child == noNode && !strings.HasPrefix(token, "$") {
			child = t.exactChild(node, valuesStep)
		}
		if child == noNode {
			return noNode
		}
		*knowing &= t.nodes[child].knowing
		node = child
	}
	return node
}

func arrayIndex(token string) bool {
	if token == "-" {
		return true
	}
	for i := 0; i < len(token); i++ {
		if token[i] < '0' || token[i] > '9' {
			return false
		}
	}
	return token != ""
}
