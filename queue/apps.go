package queue

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Limits of an app's grant.
const (
	// MaxAppNameLen bounds an app's name.
	MaxAppNameLen = 64
	// MaxAppTypes bounds the entity types one app is granted.
	MaxAppTypes = 256
	// MaxApps bounds the apps one daemon knows.
	MaxApps = 1024
)

// Errors of the app registry.
var (
	// ErrAppExists is returned by AddApp for a name already taken.
	ErrAppExists = errors.New("queue: app already exists")
	// ErrAppNotFound is returned for an unknown app name.
	ErrAppNotFound = errors.New("queue: app not found")
	// ErrInvalidApp is returned for an app whose name, types or token
	// digest is not valid, and when MaxApps are registered.
	ErrInvalidApp = errors.New("queue: invalid app")
)

// App is one app's grant on the local API: the entity types its token
// may read, and write unless ReadOnly. The token itself is never stored:
// TokenDigest is its SHA-256, which is all the API needs to recognise it.
type App struct {
	Name     string   `json:"name"`
	Types    []string `json:"types"`
	ReadOnly bool     `json:"readOnly,omitempty"`
	// TokenDigest is the hex SHA-256 of the app's token.
	TokenDigest string    `json:"tokenDigest"`
	CreatedAt   time.Time `json:"createdAt"`
}

// ValidateAppName checks an app's name: 1 to MaxAppNameLen letters,
// digits, '_', '-' or '.', starting with a letter or digit.
func ValidateAppName(s string) error {
	if s == "" || len(s) > MaxAppNameLen {
		return fmt.Errorf("%w: name must be 1 to %d characters", ErrInvalidApp, MaxAppNameLen)
	}
	for i, r := range s {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || r != '_' && r != '-' && r != '.') {
			return fmt.Errorf("%w: name %q may hold only letters, digits, '_', '-' and '.', and starts with a letter or digit", ErrInvalidApp, s)
		}
	}
	return nil
}

// validate checks an app before it is stored, and sorts its types.
func (a *App) validate() error {
	if err := ValidateAppName(a.Name); err != nil {
		return err
	}
	if len(a.Types) == 0 || len(a.Types) > MaxAppTypes {
		return fmt.Errorf("%w: an app is granted 1 to %d entity types, got %d", ErrInvalidApp, MaxAppTypes, len(a.Types))
	}
	for _, t := range a.Types {
		if err := ValidateEntityType(t); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidApp, err)
		}
	}
	a.Types = slices.Clone(a.Types)
	slices.Sort(a.Types)
	if len(slices.Compact(a.Types)) != len(a.Types) {
		return fmt.Errorf("%w: entity type listed twice", ErrInvalidApp)
	}
	if d, err := hex.DecodeString(a.TokenDigest); err != nil || len(d) != 32 {
		return fmt.Errorf("%w: token digest must be 64 hex digits", ErrInvalidApp)
	}
	return nil
}

// AddApp registers an app. Its name must be new (ErrAppExists).
func (s *Store) AddApp(ctx context.Context, a App) (App, error) {
	if err := a.validate(); err != nil {
		return App{}, err
	}
	if a.CreatedAt.IsZero() {
		a.CreatedAt = s.cfg.Now().UTC()
	}
	v, err := json.Marshal(a)
	if err != nil {
		return App{}, err
	}
	err = s.update(ctx, func(tx *txw) error {
		b := tx.b(bucketApps)
		if b.Get([]byte(a.Name)) != nil {
			return fmt.Errorf("%w: %s", ErrAppExists, a.Name)
		}
		if b.Stats().KeyN >= MaxApps {
			return fmt.Errorf("%w: %d apps are registered, the most a daemon keeps; remove one first", ErrInvalidApp, MaxApps)
		}
		return tx.put(b, []byte(a.Name), v)
	})
	return a, err
}

// RemoveApp forgets an app: its token opens nothing from then on. The
// operations it made keep its name (Operation.App).
func (s *Store) RemoveApp(ctx context.Context, name string) error {
	return s.update(ctx, func(tx *txw) error {
		b := tx.b(bucketApps)
		if b.Get([]byte(name)) == nil {
			return fmt.Errorf("%w: %s", ErrAppNotFound, name)
		}
		return tx.del(b, []byte(name))
	})
}

// Apps returns the registered apps, by name.
func (s *Store) Apps() ([]App, error) {
	apps := []App{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketApps).ForEach(func(k, v []byte) error {
			var a App
			if err := json.Unmarshal(v, &a); err != nil {
				return fmt.Errorf("queue: decode app %q: %w", k, err)
			}
			apps = append(apps, a)
			return nil
		})
	})
	return apps, err
}
