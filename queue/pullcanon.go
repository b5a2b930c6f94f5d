package queue

import (
	"bytes"
	"slices"
	"unicode/utf8"
)

// canonicalPulled is canonicalJSON for a pulled record's data, which
// jsonstrict.Check has passed: one walk over the bytes writes the
// canonical form (members sorted by name, no insignificant whitespace,
// numbers and literals as written) without decoding into maps and
// encoding them again, which cost a bootstrap about a third of its
// store time. Data it does not take on (a string with an escape other
// than \" \\ \n \r \t, or U+2028 or U+2029, which encoding/json writes
// differently) goes through canonicalJSON, so the result is always
// canonicalJSON's (FuzzCanonicalPulled).
func canonicalPulled(data []byte) ([]byte, error) {
	c := canonWriter{in: data, out: make([]byte, 0, len(data)), members: make([]canonMember, 0, 8)}
	if c.value(0) {
		c.space()
		if c.i == len(c.in) {
			return c.out, nil
		}
	}
	return canonicalJSON(data)
}

// canonMaxDepth bounds canonWriter's recursion whatever its input (what
// reaches it has passed jsonstrict.Check with MaxDataDepth).
const canonMaxDepth = MaxDataDepth + 1

// canonWriter writes the canonical form of in to out; each method
// returns false on input it does not take on.
type canonWriter struct {
	in      []byte
	i       int
	out     []byte
	members []canonMember // the members of the objects being written, innermost last
	scratch []byte
}

// canonMember is one member of an object, written at out[start:end],
// its name (no escapes) at out[start+1:nameEnd].
type canonMember struct{ start, nameEnd, end int }

func (c *canonWriter) space() {
	for c.i < len(c.in) {
		switch c.in[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

func (c *canonWriter) value(depth int) bool {
	if depth > canonMaxDepth {
		return false
	}
	c.space()
	if c.i >= len(c.in) {
		return false
	}
	switch b := c.in[c.i]; {
	case b == '{':
		return c.object(depth)
	case b == '[':
		return c.array(depth)
	case b == '"':
		_, ok := c.string()
		return ok
	case b == 't':
		return c.literal("true")
	case b == 'f':
		return c.literal("false")
	case b == 'n':
		return c.literal("null")
	case b == '-' || b >= '0' && b <= '9':
		// As written: encoding/json writes a json.Number's text.
		start := c.i
		for c.i < len(c.in) && numberByte(c.in[c.i]) {
			c.i++
		}
		c.out = append(c.out, c.in[start:c.i]...)
		return true
	}
	return false
}

func (c *canonWriter) literal(lit string) bool {
	if !bytes.HasPrefix(c.in[c.i:], []byte(lit)) {
		return false
	}
	c.i += len(lit)
	c.out = append(c.out, lit...)
	return true
}

// string copies a string; escaped says whether it held an escape.
func (c *canonWriter) string() (escaped, ok bool) {
	c.out = append(c.out, '"')
	c.i++
	for c.i < len(c.in) {
		b := c.in[c.i]
		switch {
		case b == '"':
			c.out = append(c.out, '"')
			c.i++
			return escaped, true
		case b == '\\':
			// Only the escapes encoding/json writes the same way.
			if c.i+1 >= len(c.in) {
				return escaped, false
			}
			switch c.in[c.i+1] {
			case '"', '\\', 'n', 'r', 't':
			default:
				return escaped, false
			}
			escaped = true
			c.out = append(c.out, b, c.in[c.i+1])
			c.i += 2
		case b < 0x20:
			return escaped, false
		case b < utf8.RuneSelf:
			c.out = append(c.out, b)
			c.i++
		default:
			r, n := utf8.DecodeRune(c.in[c.i:])
			if r == utf8.RuneError && n == 1 || r == '\u2028' || r == '\u2029' {
				return escaped, false
			}
			c.out = append(c.out, c.in[c.i:c.i+n]...)
			c.i += n
		}
	}
	return escaped, false
}

func (c *canonWriter) array(depth int) bool {
	c.out = append(c.out, '[')
	c.i++
	c.space()
	if c.i < len(c.in) && c.in[c.i] == ']' {
		c.out = append(c.out, ']')
		c.i++
		return true
	}
	for {
		if !c.value(depth + 1) {
			return false
		}
		c.space()
		if c.i >= len(c.in) {
			return false
		}
		switch c.in[c.i] {
		case ',':
			c.out = append(c.out, ',')
			c.i++
		case ']':
			c.out = append(c.out, ']')
			c.i++
			return true
		default:
			return false
		}
	}
}

func (c *canonWriter) object(depth int) bool {
	open := len(c.out)
	c.out = append(c.out, '{')
	c.i++
	c.space()
	if c.i < len(c.in) && c.in[c.i] == '}' {
		c.out = append(c.out, '}')
		c.i++
		return true
	}
	base := len(c.members)
	defer func() { c.members = c.members[:base] }()
	sorted := true
	for {
		c.space()
		if c.i >= len(c.in) || c.in[c.i] != '"' {
			return false
		}
		m := canonMember{start: len(c.out)}
		// A name with an escape would sort by its decoded text.
		if escaped, ok := c.string(); !ok || escaped {
			return false
		}
		m.nameEnd = len(c.out) - 1
		c.space()
		if c.i >= len(c.in) || c.in[c.i] != ':' {
			return false
		}
		c.out = append(c.out, ':')
		c.i++
		if !c.value(depth + 1) {
			return false
		}
		m.end = len(c.out)
		if len(c.members) > base && bytes.Compare(c.name(c.members[len(c.members)-1]), c.name(m)) >= 0 {
			sorted = false
		}
		c.members = append(c.members, m)
		c.space()
		if c.i >= len(c.in) {
			return false
		}
		switch c.in[c.i] {
		case ',':
			c.out = append(c.out, ',')
			c.i++
			continue
		case '}':
			c.out = append(c.out, '}')
			c.i++
		default:
			return false
		}
		break
	}
	if !sorted {
		// Written again in name order: the same bytes, so the places of
		// the members of the objects around it stay true.
		ms := c.members[base:]
		slices.SortFunc(ms, func(a, b canonMember) int { return bytes.Compare(c.name(a), c.name(b)) })
		for k := 1; k < len(ms); k++ {
			if bytes.Equal(c.name(ms[k-1]), c.name(ms[k])) {
				return false // a name twice: jsonstrict.Check refuses it
			}
		}
		c.scratch = append(c.scratch[:0], c.out[open:]...)
		w := c.out[:open+1]
		for k, m := range ms {
			if k > 0 {
				w = append(w, ',')
			}
			w = append(w, c.scratch[m.start-open:m.end-open]...)
		}
		c.out = append(w, '}')
	}
	return true
}

func (c *canonWriter) name(m canonMember) []byte { return c.out[m.start+1 : m.nameEnd] }

func numberByte(b byte) bool {
	return b >= '0' && b <= '9' || b == '-' || b == '+' || b == '.' || b == 'e' || b == 'E'
}
