// Package jsonstrict checks that bytes are exactly one JSON value that
// every JSON reader understands the same way.
//
// encoding/json accepts input that other readers take differently, and
// rewrites some of it on the way: invalid UTF-8 and lone UTF-16
// surrogate escapes become U+FFFD (so {"\xff":1} and {"\xfe":1} are the
// same object once decoded), and a duplicated member name keeps its last
// value where other parsers keep the first or refuse. Data that is
// stored, fingerprinted or forwarded must mean one thing, so syncd's
// local API and the idempotency gate refuse such input with 400 before
// anything reads it (RFC 8259 §8.1 and §4, RFC 7493 I-JSON).
//
// Check also bounds nesting depth, so that no later recursive walk over
// the value (a merge patch, canonical re-encoding) can be made to do
// work quadratic in the input or exhaust a goroutine's stack.
//
// Check is one linear pass with no allocation for input without
// objects; each object costs one small set of its member names.
//
// It lives in the idempotency module, not under an internal/ directory,
// because the daemon (a separate module) refuses the same input with the
// same check: a backend may call it too, to refuse a body the way the
// gate does before the gate sees it.
package jsonstrict

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// DefaultMaxDepth is the nesting depth Check allows when given a depth of
// 0: 128 levels of objects and arrays, far beyond what an application's
// records use and far below what would strain a recursive reader.
const DefaultMaxDepth = 128

// Kind says what made the input unacceptable.
type Kind int

const (
	// Syntax: not JSON (RFC 8259), or more than one value.
	Syntax Kind = iota + 1
	// InvalidUTF8: bytes that are not UTF-8, including encoded
	// surrogates.
	InvalidUTF8
	// LoneSurrogate: a \uD800-\uDFFF escape that is not half of a pair.
	LoneSurrogate
	// DuplicateName: an object names one member twice (after escapes
	// are decoded: "a" and "\u0061" are the same name).
	DuplicateName
	// TooDeep: objects and arrays nested deeper than allowed.
	TooDeep
)

func (k Kind) String() string {
	switch k {
	case Syntax:
		return "syntax"
	case InvalidUTF8:
		return "invalid UTF-8"
	case LoneSurrogate:
		return "lone surrogate"
	case DuplicateName:
		return "duplicate member name"
	case TooDeep:
		return "too deep"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Error is what Check returns: what was wrong and where.
type Error struct {
	Kind   Kind
	Offset int    // byte offset in the input where the problem starts
	Detail string // a short human reason
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s at byte %d", e.Detail, e.Offset)
}

// Check reports whether data is exactly one JSON value (surrounded by
// optional whitespace) with valid UTF-8, no lone surrogate escape, no
// duplicate member name in any object and nesting no deeper than
// maxDepth (0 means DefaultMaxDepth). The error is an *Error.
func Check(data []byte, maxDepth int) error {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	c := checker{data: data, maxDepth: maxDepth}
	c.skipSpace()
	if c.pos >= len(c.data) {
		return c.fail(Syntax, "no JSON value")
	}
	if err := c.value(0); err != nil {
		return err
	}
	c.skipSpace()
	if c.pos < len(c.data) {
		return c.fail(Syntax, "data after the JSON value")
	}
	return nil
}

type checker struct {
	data      []byte
	pos       int
	maxDepth  int
	scratch   []byte // decoded member name
	inScratch bool   // str's last result is scratch, reused by the next call
}

func (c *checker) fail(k Kind, detail string) *Error {
	return &Error{Kind: k, Offset: c.pos, Detail: detail}
}

func (c *checker) skipSpace() {
	for c.pos < len(c.data) {
		switch c.data[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// value checks one value at c.pos; depth counts the containers around it.
// Containers recurse, but never deeper than maxDepth.
func (c *checker) value(depth int) error {
	if c.pos >= len(c.data) {
		return c.fail(Syntax, "unexpected end of input")
	}
	switch b := c.data[c.pos]; {
	case b == '{':
		return c.object(depth + 1)
	case b == '[':
		return c.array(depth + 1)
	case b == '"':
		_, err := c.str(false)
		return err
	case b == 't':
		return c.literal("true")
	case b == 'f':
		return c.literal("false")
	case b == 'n':
		return c.literal("null")
	case b == '-' || ('0' <= b && b <= '9'):
		return c.number()
	default:
		return c.fail(Syntax, fmt.Sprintf("unexpected character %q", b))
	}
}

func (c *checker) literal(lit string) error {
	if len(c.data)-c.pos < len(lit) || string(c.data[c.pos:c.pos+len(lit)]) != lit {
		return c.fail(Syntax, "invalid literal")
	}
	c.pos += len(lit)
	return nil
}

func (c *checker) number() error {
	d := c.data
	if d[c.pos] == '-' {
		c.pos++
	}
	switch {
	case c.pos < len(d) && d[c.pos] == '0':
		c.pos++
	case c.pos < len(d) && '1' <= d[c.pos] && d[c.pos] <= '9':
		c.digits()
	default:
		return c.fail(Syntax, "invalid number")
	}
	if c.pos < len(d) && d[c.pos] == '.' {
		c.pos++
		if !c.digits() {
			return c.fail(Syntax, "invalid number: no digit after '.'")
		}
	}
	if c.pos < len(d) && (d[c.pos] == 'e' || d[c.pos] == 'E') {
		c.pos++
		if c.pos < len(d) && (d[c.pos] == '+' || d[c.pos] == '-') {
			c.pos++
		}
		if !c.digits() {
			return c.fail(Syntax, "invalid number: no digit in exponent")
		}
	}
	return nil
}

func (c *checker) digits() bool {
	start := c.pos
	for c.pos < len(c.data) && '0' <= c.data[c.pos] && c.data[c.pos] <= '9' {
		c.pos++
	}
	return c.pos > start
}

func (c *checker) object(depth int) error {
	if depth > c.maxDepth {
		return c.fail(TooDeep, fmt.Sprintf("nested deeper than %d levels", c.maxDepth))
	}
	c.pos++ // '{'
	c.skipSpace()
	if c.pos < len(c.data) && c.data[c.pos] == '}' {
		c.pos++
		return nil
	}
	var names nameSet
	for {
		if c.pos >= len(c.data) || c.data[c.pos] != '"' {
			return c.fail(Syntax, "expected a member name")
		}
		at := c.pos
		name, err := c.str(true)
		if err != nil {
			return err
		}
		if c.inScratch {
			name = bytes.Clone(name)
		}
		if !names.add(name) {
			return &Error{Kind: DuplicateName, Offset: at, Detail: fmt.Sprintf("member name %q appears twice", name)}
		}
		c.skipSpace()
		if c.pos >= len(c.data) || c.data[c.pos] != ':' {
			return c.fail(Syntax, "expected ':' after a member name")
		}
		c.pos++
		c.skipSpace()
		if err := c.value(depth); err != nil {
			return err
		}
		c.skipSpace()
		if c.pos >= len(c.data) {
			return c.fail(Syntax, "unexpected end of input in an object")
		}
		switch c.data[c.pos] {
		case ',':
			c.pos++
			c.skipSpace()
		case '}':
			c.pos++
			return nil
		default:
			return c.fail(Syntax, "expected ',' or '}' in an object")
		}
	}
}

func (c *checker) array(depth int) error {
	if depth > c.maxDepth {
		return c.fail(TooDeep, fmt.Sprintf("nested deeper than %d levels", c.maxDepth))
	}
	c.pos++ // '['
	c.skipSpace()
	if c.pos < len(c.data) && c.data[c.pos] == ']' {
		c.pos++
		return nil
	}
	for {
		if err := c.value(depth); err != nil {
			return err
		}
		c.skipSpace()
		if c.pos >= len(c.data) {
			return c.fail(Syntax, "unexpected end of input in an array")
		}
		switch c.data[c.pos] {
		case ',':
			c.pos++
			c.skipSpace()
		case ']':
			c.pos++
			return nil
		default:
			return c.fail(Syntax, "expected ',' or ']' in an array")
		}
	}
}

// str checks the string at c.pos (its opening quote). With decode it
// returns the string's decoded text: a slice of the input when the
// string has no escape, else of a scratch buffer that the next call
// reuses. Without decode, nothing is built.
func (c *checker) str(decode bool) ([]byte, error) {
	d := c.data
	c.pos++ // '"'
	c.scratch = c.scratch[:0]
	start := c.pos
	escaped := false
	for {
		if c.pos >= len(d) {
			return nil, c.fail(Syntax, "unterminated string")
		}
		b := d[c.pos]
		switch {
		case b == '"':
			var s []byte
			if decode {
				c.inScratch = escaped
				if escaped {
					s = c.scratch
				} else {
					s = d[start:c.pos:c.pos]
				}
			}
			c.pos++
			return s, nil
		case b < 0x20:
			return nil, c.fail(Syntax, "control character in a string")
		case b == '\\':
			if decode && !escaped {
				c.scratch = append(c.scratch, d[start:c.pos]...)
			}
			escaped = true
			r, err := c.escape()
			if err != nil {
				return nil, err
			}
			if decode {
				c.scratch = utf8.AppendRune(c.scratch, r)
			}
		case b < utf8.RuneSelf:
			if decode && escaped {
				c.scratch = append(c.scratch, b)
			}
			c.pos++
		default:
			r, size := utf8.DecodeRune(d[c.pos:])
			if r == utf8.RuneError && size <= 1 {
				return nil, c.fail(InvalidUTF8, "invalid UTF-8")
			}
			if decode && escaped {
				c.scratch = append(c.scratch, d[c.pos:c.pos+size]...)
			}
			c.pos += size
		}
	}
}

// escape reads the escape sequence at c.pos (its backslash) and returns
// the rune it stands for; a surrogate pair is read whole.
func (c *checker) escape() (rune, error) {
	d := c.data
	if c.pos+1 >= len(d) {
		return 0, c.fail(Syntax, "unterminated escape")
	}
	switch d[c.pos+1] {
	case '"', '\\', '/':
		c.pos += 2
		return rune(d[c.pos-1]), nil
	case 'b':
		c.pos += 2
		return '\b', nil
	case 'f':
		c.pos += 2
		return '\f', nil
	case 'n':
		c.pos += 2
		return '\n', nil
	case 'r':
		c.pos += 2
		return '\r', nil
	case 't':
		c.pos += 2
		return '\t', nil
	case 'u':
	default:
		return 0, c.fail(Syntax, "invalid escape")
	}
	at := c.pos
	r, ok := hex4(d, c.pos+2)
	if !ok {
		return 0, c.fail(Syntax, `invalid \u escape`)
	}
	c.pos += 6
	switch {
	case r < 0xD800 || r > 0xDFFF:
		return r, nil
	case r >= 0xDC00:
		return 0, &Error{Kind: LoneSurrogate, Offset: at, Detail: fmt.Sprintf(`lone low surrogate \u%04X`, r)}
	}
	// A high surrogate must be followed by an escaped low one.
	if c.pos+1 < len(d) && d[c.pos] == '\\' && d[c.pos+1] == 'u' {
		lo, ok := hex4(d, c.pos+2)
		if !ok {
			return 0, c.fail(Syntax, `invalid \u escape`)
		}
		if 0xDC00 <= lo && lo <= 0xDFFF {
			c.pos += 6
			return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), nil
		}
	}
	return 0, &Error{Kind: LoneSurrogate, Offset: at, Detail: fmt.Sprintf(`lone high surrogate \u%04X`, r)}
}

func hex4(d []byte, at int) (rune, bool) {
	if at+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, b := range d[at : at+4] {
		r <<= 4
		switch {
		case '0' <= b && b <= '9':
			r |= rune(b - '0')
		case 'a' <= b && b <= 'f':
			r |= rune(b - 'a' + 10)
		case 'A' <= b && b <= 'F':
			r |= rune(b - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// nameSet holds one object's member names: a list while small, a map
// once a linear search would cost more than hashing.
type nameSet struct {
	list [][]byte
	set  map[string]struct{}
}

const nameSetListMax = 16

// add records name, which must stay unchanged, and reports whether it
// was new.
func (n *nameSet) add(name []byte) bool {
	if n.set != nil {
		if _, dup := n.set[string(name)]; dup {
			return false
		}
		n.set[string(name)] = struct{}{}
		return true
	}
	for _, have := range n.list {
		if bytes.Equal(have, name) {
			return false
		}
	}
	if len(n.list) < nameSetListMax {
		n.list = append(n.list, name)
		return true
	}
	n.set = make(map[string]struct{}, 2*nameSetListMax)
	for _, have := range n.list {
		n.set[string(have)] = struct{}{}
	}
	n.set[string(name)] = struct{}{}
	n.list = nil
	return true
}
