package idempotency

import (
	"context"
	"errors"
	"fmt"
)

// Do runs fn at most once in effect for (actor, key), for code that is
// not an HTTP handler: a queue consumer, a gRPC method, a job. It is the
// gate without HTTP: in one store transaction it reserves (actor, key),
// runs fn with the transaction in its context (boltstore.TxFromContext,
// pgstore.TxFromContext, sqlstore.TxFromContext), stores fn's result and
// commits. It returns
//
//   - fn's result, replayed false, when fn ran and its result committed;
//   - the stored result of an earlier run, replayed true;
//   - ErrKeyReused when the key was used with another fingerprint;
//   - ErrInFlight when another run holds the key (try again later);
//   - fn's error when fn failed: nothing committed, and the next Do with
//     the key runs fn again;
//   - a store error before fn ran: nothing committed;
//   - an error wrapping ErrOutcomeUnknown when completing or committing
//     failed after fn ran: it may have committed; Do again with the same
//     key returns the stored result or runs fn.
//
// fingerprint says what the request is, so a key sent again with
// another request is refused: Fingerprint of the message works, or any
// stable string (a hash of the message's business fields). The result
// is stored as it is, up to Config.MaxResponseBytes; a larger result
// rolls the run back and returns an error.
func (g *Gate) Do(ctx context.Context, actor, key, fingerprint string, fn func(ctx context.Context) ([]byte, error)) (result []byte, replayed bool, err error) {
	if actor == "" {
		return nil, false, errors.New("idempotency: Do: empty actor")
	}
	if k, ok := parseKey([]string{key}); !ok || k != key {
		return nil, false, fmt.Errorf("idempotency: Do: the key must be 1 to %d printable ASCII bytes", MaxKeyLength)
	}
	o, ans, err := g.execute(ctx, actor, key, OperationDo, fingerprint, func(txCtx context.Context) (*answer, error) {
		v, err := fn(txCtx)
		if err != nil {
			return nil, err
		}
		if int64(len(v)) > g.cfg.MaxResponseBytes {
			return nil, errResponseTooLarge
		}
		return &answer{status: 200, body: v}, nil
	})
	switch o {
	case OutcomeExecuted:
		return ans.body, false, nil
	case OutcomeReplayed:
		return ans.body, true, nil
	case OutcomeKeyReused:
		return nil, false, ErrKeyReused
	case OutcomeInFlight:
		return nil, false, ErrInFlight
	}
	return nil, false, err
}

// OperationDo is the operation type stored with the records Do makes.
const OperationDo = "do"
