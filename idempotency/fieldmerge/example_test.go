package fieldmerge_test

import (
	"encoding/json"
	"fmt"

	"github.com/syncd/syncd/idempotency/fieldmerge"
)

// A backend keeps, beside each record's data and version, the version
// its life began at and the version of each path's latest change, and
// runs every update through Merge. Three devices edit version 1 of a note
// offline: the phone its title, the laptop its city, the tablet its title
// again. The first two land; the third conflicts on the title alone and
// changes nothing.
func Example() {
	stored := fieldmerge.Record{
		Data:    json.RawMessage(`{"title":"Groceries","done":false,"address":{"city":"Paris","zip":"75001"}}`),
		Version: 1,
		Since:   1, // created at version 1
	}

	// write is the backend's update handler: base and the device's whole
	// data after its change come from the request, and so do the paths
	// (here, those of the merge patch the device made).
	write := func(device string, base int64, patch, data string) {
		paths, err := fieldmerge.PatchPaths(json.RawMessage(patch))
		if err != nil {
			fmt.Println(device, "400:", err)
			return
		}
		res, err := fieldmerge.Merge(stored, fieldmerge.Update{Base: base, Paths: paths, Data: json.RawMessage(data)})
		if err != nil {
			fmt.Println(device, "400:", err)
			return
		}
		if len(res.Conflicts) > 0 {
			fmt.Printf("%s: 409, conflict on %s; the record stays at version %d\n", device, fieldmerge.Quote(res.Conflicts), res.Record.Version)
			return
		}
		stored = res.Record // Data, Version, Since and Paths are saved together
		fmt.Printf("%s: 200, %s applied, version %d: %s\n", device, fieldmerge.Quote(res.Changed), stored.Version, stored.Data)
	}

	write("phone", 1, `{"title":"Groceries for Sunday"}`,
		`{"title":"Groceries for Sunday","done":false,"address":{"city":"Paris","zip":"75001"}}`)
	write("laptop", 1, `{"address":{"city":"Lyon"}}`,
		`{"title":"Groceries","done":false,"address":{"city":"Lyon","zip":"75001"}}`)
	write("tablet", 1, `{"title":"Shopping","done":true}`,
		`{"title":"Shopping","done":true,"address":{"city":"Paris","zip":"75001"}}`)

	// The conflict answer can name what changed since the tablet's base.
	fmt.Println("changed since version 1:", fieldmerge.ChangedSince(stored, 1))
	fmt.Println("path versions:", stored.Paths)

	// Output:
	// phone: 200, "/title" applied, version 2: {"address":{"city":"Paris","zip":"75001"},"done":false,"title":"Groceries for Sunday"}
	// laptop: 200, "/address/city" applied, version 3: {"address":{"city":"Lyon","zip":"75001"},"done":false,"title":"Groceries for Sunday"}
	// tablet: 409, conflict on "/title"; the record stays at version 3
	// changed since version 1: [/address/city /title]
	// path versions: map[/address/city:3 /title:2]
}
