package envoyconfig

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
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

// marshalYAML renders doc as block-style YAML. Values may be object, list,
// string, bool, int or uint32. Strings are emitted plain only when every YAML
// 1.1 and 1.2 parser reads them back as the same string; otherwise quoted.
func marshalYAML(doc object) ([]byte, error) {
	if len(doc) == 0 {
		return []byte("{}\n"), nil
	}
	var e yamlEncoder
	if err := e.object(doc, 0, false); err != nil {
		return nil, err
	}
	return e.buf.Bytes(), nil
}

type yamlEncoder struct {
	buf bytes.Buffer
}

// object writes the members of o at the given indentation. When continued is
// true the first member goes on the current line, after a list item's "- ".
func (e *yamlEncoder) object(o object, indent int, continued bool) error {
	seen := make(map[string]bool, len(o))
	for i, f := range o {
		if seen[f.key] {
			return fmt.Errorf("envoyconfig: duplicate YAML key %q", f.key)
		}
		seen[f.key] = true
		if i > 0 || !continued {
			e.indent(indent)
		}
		if err := e.scalarString(f.key); err != nil {
			return err
		}
		e.buf.WriteByte(':')
		if err := e.nested(f.value, indent); err != nil {
			return fmt.Errorf("%s: %w", f.key, err)
		}
	}
	return nil
}

// nested writes the value of a mapping entry or list item whose indicator
// ("key:" or "-") has just been written at the given indentation.
func (e *yamlEncoder) nested(v any, indent int) error {
	switch v := v.(type) {
	case object:
		if len(v) == 0 {
			e.buf.WriteString(" {}\n")
			return nil
		}
		e.buf.WriteByte('\n')
		return e.object(v, indent+2, false)
	case list:
		if len(v) == 0 {
			e.buf.WriteString(" []\n")
			return nil
		}
		e.buf.WriteByte('\n')
		return e.list(v, indent+2)
	default:
		e.buf.WriteByte(' ')
		if err := e.scalar(v); err != nil {
			return err
		}
		e.buf.WriteByte('\n')
		return nil
	}
}

func (e *yamlEncoder) list(l list, indent int) error {
	for i, item := range l {
		e.indent(indent)
		e.buf.WriteByte('-')
		var err error
		if o, ok := item.(object); ok && len(o) > 0 {
			e.buf.WriteByte(' ')
			err = e.object(o, indent+2, true)
		} else {
			err = e.nested(item, indent)
		}
		if err != nil {
			return fmt.Errorf("[%d]: %w", i, err)
		}
	}
	return nil
}

func (e *yamlEncoder) indent(n int) {
	for range n {
		e.buf.WriteByte(' ')
	}
}

func (e *yamlEncoder) scalar(v any) error {
	switch v := v.(type) {
	case string:
		return e.scalarString(v)
	case bool:
		e.buf.WriteString(strconv.FormatBool(v))
	case int:
		e.buf.WriteString(strconv.Itoa(v))
	case uint32:
		e.buf.WriteString(strconv.FormatUint(uint64(v), 10))
	default:
		return fmt.Errorf("envoyconfig: cannot encode %T as YAML", v)
	}
	return nil
}

// scalarString writes s plain when that is unambiguous, single-quoted when it
// is printable on one line (JSON payloads stay readable), and double-quoted
// with escapes otherwise.
func (e *yamlEncoder) scalarString(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("envoyconfig: string is not valid UTF-8: %q", s)
	}
	switch {
	case isPlainSafe(s):
		e.buf.WriteString(s)
	case !strings.ContainsFunc(s, needsEscape):
		e.buf.WriteByte('\'')
		e.buf.WriteString(strings.ReplaceAll(s, "'", "''"))
		e.buf.WriteByte('\'')
	default:
		e.buf.WriteByte('"')
		for _, r := range s {
			switch {
			case r == '"' || r == '\\':
				e.buf.WriteByte('\\')
				e.buf.WriteRune(r)
			case needsEscape(r):
				fmt.Fprintf(&e.buf, `\u%04X`, r)
			default:
				e.buf.WriteRune(r)
			}
		}
		e.buf.WriteByte('"')
	}
	return nil
}

// needsEscape reports runes outside YAML's printable set, plus the line
// breaks that quoted scalars would fold.
func needsEscape(r rune) bool {
	return r < ' ' || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0x2028 || r == 0x2029 || r == 0xfeff
}

// isPlainSafe accepts identifiers, paths and type URLs: a letter, '_' or '/'
// followed by letters, digits and "_./-", excluding words that YAML 1.1 reads
// as booleans or null.
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
