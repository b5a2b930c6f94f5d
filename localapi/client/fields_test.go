package client_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/localapi/client"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// The client's types carry every member the API sends of an entity and
// an operation, so a field added to the queue reaches Go apps too.
func TestClientTypesCarryEveryMember(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ api, client any }{
		{queue.Entity{}, client.Entity{}},
		{queue.Operation{}, client.Operation{}},
		{queue.Event{}, client.Event{}},
		{daemon.Status{}, client.Status{}},
		{daemon.RemoteProblem{}, client.RemoteProblem{}},
		{queue.ServerState{}, client.ServerRecord{}},
		{queue.Conflict{}, client.Conflict{}},
		{queue.ConflictPath{}, client.ConflictPath{}},
		{transport.Version{}, client.Version{}},
		{daemon.Sample{}, client.StatusSample{}},
	} {
		have := jsonNames(reflect.TypeOf(c.client))
		for name := range jsonNames(reflect.TypeOf(c.api)) {
			if !have[name] {
				t.Errorf("%T has no member %q of %T", c.client, name, c.api)
			}
		}
	}
}

func jsonNames(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "-" && f.IsExported() {
			names[name] = true
		}
	}
	return names
}
