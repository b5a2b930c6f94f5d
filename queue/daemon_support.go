package queue

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// EntityRow returns an entity's stored row, including one deleted locally
// whose delete has not reached the server yet (GetEntity hides those).
// The daemon reads it at send time for the server id an update or delete
// is addressed to.
func (s *Store) EntityRow(account, entityType, id string) (Entity, error) {
	var e Entity
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketEntities).Get(entityKey(account, entityType, id))
		if v == nil {
			return fmt.Errorf("%w: %s/%s", ErrEntityNotFound, entityType, id)
		}
		return json.Unmarshal(v, &e)
	})
	return e, err
}
