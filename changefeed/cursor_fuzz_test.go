package changefeed

import "testing"

// FuzzCursor: ParseCursor never panics and accepts only the one spelling
// EncodeCursor gives (a client's cursor reads back as the same string),
// of a cursor a server can hold (positions not negative, a floor above
// the position); and every such cursor, encoded, parses back to itself.
func FuzzCursor(f *testing.F) {
	for _, s := range []string{"", "0", "7", "7.9", "7.7", "9.7", "007", "7.09", "-1", "+7", "7.", ".7", "7.9.11",
		"9223372036854775807", "9223372036854775808", "1.9223372036854775807", " 7", "7 ", "0x10", "٣"} {
		f.Add(s, int64(3), int64(0), true)
	}
	f.Add("", int64(0), int64(0), false)
	f.Add("", int64(5), int64(9), true)
	f.Add("", int64(-1), int64(9), true)
	f.Fuzz(func(t *testing.T, s string, pos, floor int64, set bool) {
		c, err := ParseCursor(s)
		if err == nil {
			if got := EncodeCursor(c); got != s {
				t.Fatalf("ParseCursor(%q) = %+v, which encodes as %q", s, c, got)
			}
			if c.Set != (s != "") || c.Pos < 0 || c.Floor < 0 || c.Floor != 0 && c.Floor <= c.Pos || !c.Set && c != (Cursor{}) {
				t.Fatalf("ParseCursor(%q) = %+v: not a cursor a server holds", s, c)
			}
		} else if s == "" {
			t.Fatalf(`ParseCursor("") = %v`, err)
		}

		in := Cursor{Set: set, Pos: pos, Floor: floor}
		want := in
		switch {
		case !set:
			want = Cursor{}
		case pos < 0 || floor < 0:
			return // no server holds it
		case floor <= pos:
			want.Floor = 0 // no floor: Pos decides
		}
		got, err := ParseCursor(EncodeCursor(in))
		if err != nil || got != want {
			t.Fatalf("%+v encoded as %q parses as %+v, %v; want %+v", in, EncodeCursor(in), got, err, want)
		}
	})
}
