package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/syncd/syncd/localapi/client"
)

// An app writes a record, then follows its sync state live. Reading the
// status first and subscribing after its lastEventSeq leaves no gap;
// Next reconnects by itself after a dropped connection or a daemon
// restart, without losing or repeating an event.
func Example() {
	ctx := context.Background()
	token, err := client.ReadToken("/var/lib/syncd") // the daemon's data directory
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.New(client.Config{Token: token})
	if err != nil {
		log.Fatal(err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, client.SubscribeOptions{Since: st.LastEventSeq, Types: []string{"entity."}})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()

	note, err := c.Create(ctx, "note", "", map[string]any{"title": "buy milk"},
		client.WriteOptions{IdempotencyKey: "7b0c6f3e-2d43-4f7e-9f7a-1d2a5c1e9b10"})
	if err != nil {
		log.Fatal(err)
	}
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		switch {
		case e.Type == client.EventResync:
			// Events were dropped from the history: re-read what you show.
		case e.EntityID == note.ID && e.SyncState == "synced":
			fmt.Println("saved on the server")
			return
		case e.EntityID == note.ID && e.SyncState == "failed":
			got, _ := c.Get(ctx, "note", note.ID)
			fmt.Println("needs your attention:", got.SyncError)
			return
		}
	}
}

// An app settles a conflict field by field: the user picks a side for
// each field both devices changed; this device's other edits are kept.
func ExampleClient_ResolvePaths() {
	ctx := context.Background()
	c, err := client.New(client.Config{Token: "…"})
	if err != nil {
		log.Fatal(err)
	}
	note, err := c.Get(ctx, "note", "n1")
	if err != nil {
		log.Fatal(err)
	}
	if note.SyncState != "conflict" {
		return
	}
	if note.Conflict == nil {
		// The conflict is of the whole record: take one side, or merge
		// note.Data and note.Server.Data yourself and ResolveData.
		_, err = c.Resolve(ctx, "note", note.ID, client.TakeServer)
		if err != nil {
			log.Fatal(err)
		}
		return
	}
	sides := map[string]string{}
	for _, p := range note.Conflict.Paths {
		fmt.Printf("%s: was %s, here %s, there %s\n", p.Path, p.Base, p.Local, p.Server)
		sides[p.Path] = client.TakeLocal // what the user chose
	}
	res, err := c.ResolvePaths(ctx, "note", note.ID, sides)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("sent as operation", res.OperationID)
}
