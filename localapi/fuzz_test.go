package localapi

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeObject: the body parser never panics, and what it accepts is
// one JSON object with only the allowed members.
func FuzzDecodeObject(f *testing.F) {
	for _, s := range []string{`{"id":"a","data":{}}`, `{"data":[1]}`, `{`, `null`, `{"data":{}} {}`, `{"Data":1}`, `"x"`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var id string
		var data json.RawMessage
		err := decodeObject(body, &field{name: "id", dst: &id}, &field{name: "data", dst: &data, required: true})
		if err != nil {
			if _, ok := err.(*apiError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil || m == nil {
			t.Fatalf("accepted a body that is not a JSON object: %q", body)
		}
		for k := range m {
			if k != "id" && k != "data" {
				t.Fatalf("accepted member %q", k)
			}
		}
		if len(data) == 0 {
			t.Fatal("accepted without data")
		}
	})
}
