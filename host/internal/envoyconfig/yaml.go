package envoyconfig

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// object is an ordered mapping. Keeping Envoy's documentation order (name
// before details, "@type" first) makes the rendered files readable and the
// output independent of Go's map iteration order.
type object []field

type field struct {
	key   string
	value any
}

// list is a sequence of values.
type list []any

// marshalYAML renders doc as block-style YAML with two-space indentation.
// Values may be object, list, string, bool, int or uint32. Strings are plain
// only when every YAML 1.1 and 1.2 reader takes them back as the same string
// (Envoy's reader still treats yes, on and y as booleans); otherwise quoted.
func marshalYAML(doc object) ([]byte, error) {
	root, err := yamlNode(doc)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("envoyconfig: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("envoyconfig: %w", err)
	}
	return buf.Bytes(), nil
}

// yamlNode converts v to the encoder's node tree, refusing what Envoy could
// not read back as written: duplicate keys and text that is not UTF-8 (the
// encoder would turn it into !!binary).
func yamlNode(v any) (*yaml.Node, error) {
	switch v := v.(type) {
	case object:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: make([]*yaml.Node, 0, 2*len(v))}
		seen := make(map[string]bool, len(v))
		for _, f := range v {
			if seen[f.key] {
				return nil, fmt.Errorf("envoyconfig: duplicate YAML key %q", f.key)
			}
			seen[f.key] = true
			key, err := yamlNode(f.key)
			if err != nil {
				return nil, err
			}
			value, err := yamlNode(f.value)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.key, err)
			}
			n.Content = append(n.Content, key, value)
		}
		return n, nil
	case list:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: make([]*yaml.Node, 0, len(v))}
		for i, item := range v {
			c, err := yamlNode(item)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			n.Content = append(n.Content, c)
		}
		return n, nil
	case string:
		if !utf8.ValidString(v) {
			return nil, fmt.Errorf("envoyconfig: string is not valid UTF-8: %q", v)
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v, Style: stringStyle(v)}, nil
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}, nil
	case int:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(v)}, nil
	case uint32:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(uint64(v), 10)}, nil
	}
	return nil, fmt.Errorf("envoyconfig: cannot encode %T as YAML", v)
}

// stringStyle keeps identifiers, paths and type URLs plain, single-quotes
// other printable text (JSON payloads stay readable) and double-quotes text
// whose characters need escapes, or which YAML 1.1 reads as line breaks.
func stringStyle(s string) yaml.Style {
	switch {
	case strings.ContainsFunc(s, needsEscape):
		return yaml.DoubleQuotedStyle
	case isPlainSafe(s):
		return 0
	}
	return yaml.SingleQuotedStyle
}

// needsEscape reports runes outside YAML's printable set, plus the line
// breaks that quoted scalars would fold.
func needsEscape(r rune) bool {
	return r < ' ' || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0x2028 || r == 0x2029 || r == 0xfeff
}

// isPlainSafe accepts a letter, '_' or '/' followed by letters, digits and
// "_./-", excluding words that YAML 1.1 reads as booleans or null.
func isPlainSafe(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c == '/':
		case (c >= '0' && c <= '9') || c == '.' || c == '-':
			if i == 0 {
				return false
			}
		default:
			return false
		}
	}
	switch strings.ToLower(s) {
	case "y", "n", "yes", "no", "on", "off", "true", "false", "null":
		return false
	}
	return true
}
