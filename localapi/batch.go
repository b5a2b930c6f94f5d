package localapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/queue"
)

// DefaultMaxBatchBytes bounds a POST /v1/batch body (4 MiB): a batch may
// be larger than a single write's body, and each of its writes keeps the
// single-write data limit.
const DefaultMaxBatchBytes = 4 << 20

const batchPath = "/v1/batch"

// batchWrite is one write of a batch.
type batchWrite struct {
	Op             string          `json:"op"`
	Type           string          `json:"type"`
	ID             string          `json:"id"`
	Data           json.RawMessage `json:"data"`
	IdempotencyKey string          `json:"idempotencyKey"`
}

// batchAnswer is the answer to a batch: each write's entity answer, in
// order.
type batchAnswer struct {
	Results []entityAnswer `json:"results"`
}

// batchIndexError is a refused batch: the write at Index is why.
type batchIndexError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Index   int    `json:"index"`
	} `json:"error"`
}

// POST /v1/batch {"writes":[{op, type, id?, data?, idempotencyKey?}, ...],
// "ordered"?: bool} → 200 {"results":[entity + operationId, ...]}: every
// write in ONE transaction, all or none. With ordered, the operations
// reach the server in the batch's order across entities (each waits for
// the one before it; a failed one holds the rest). A refused write answers its own error with
// "index" and nothing is written. A write's idempotencyKey acts as the
// Idempotency-Key of the same write sent alone (same key and write: the
// first answer; another write: 422).
func (s *Server) batch(w http.ResponseWriter, r *http.Request) {
	if _, err := query(r); err != nil {
		s.fail(w, r, err)
		return
	}
	if len(r.Header.Values(headerIdempotencyKey)) > 0 {
		s.fail(w, r, badRequest(CodeInvalidRequest, "a batch takes no Idempotency-Key header: give each write its idempotencyKey"))
		return
	}
	var raw []json.RawMessage
	var ordered bool
	body, err := readBody(r)
	if err == nil {
		// Two levels for the writes array and a write, so a write nests
		// as deep as a single write's body may: its data 127 levels.
		err = decodeObjectDepth(body, MaxJSONDepth+2, &field{name: "writes", dst: &raw, required: true}, &field{name: "ordered", dst: &ordered})
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(raw) == 0 || len(raw) > queue.MaxBatchWrites {
		s.fail(w, r, badRequest(CodeInvalidRequest, fmt.Sprintf("writes must hold 1 to %d writes, got %d", queue.MaxBatchWrites, len(raw))))
		return
	}
	ws := make([]queue.Write, len(raw))
	for i, item := range raw {
		wr, err := s.batchItem(r, item)
		if err != nil {
			s.failIndex(w, r, i, err)
			return
		}
		ws[i] = wr
	}
	var results []queue.Result
	err = callerOf(r).commit(func() error {
		return s.d.AccountWrite(func(account string) error {
			for i := range ws {
				ws[i].AccountID = account
			}
			for {
				// ApplyBatch fills in what it generates: each try
				// starts from the writes as parsed.
				var err error
				results, err = s.store.ApplyBatch(r.Context(), slices.Clone(ws), ordered)
				// A key refused as reused whose operation an older
				// syncd stored for this same write: again with its
				// fingerprint. Each write changes at most once.
				var be *queue.BatchError
				if !errors.As(err, &be) || !errors.Is(be.Err, queue.ErrKeyReused) {
					return err
				}
				fp := s.storedLegacyFingerprint(ws[be.Index], account, "")
				if fp == "" {
					return err
				}
				ws[be.Index].RequestFingerprint = fp
			}
		})
	})
	if errors.Is(err, daemon.ErrNoSession) {
		err = errNoSession
	}
	var be *queue.BatchError
	if errors.As(err, &be) {
		s.failIndex(w, r, be.Index, be.Err)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.d.Notify()
	ans := batchAnswer{Results: make([]entityAnswer, len(results))}
	for i, res := range results {
		e := res.Entity
		if e.ID == "" {
			op := res.Operation
			e = queue.Entity{AccountID: op.AccountID, Type: op.EntityType, ID: op.EntityID, Deleted: true}
			if op.State == queue.StateDone {
				e.SyncState = queue.SyncSynced
			}
		}
		ans.Results[i] = entityAnswer{Entity: e, OperationID: res.Operation.ID}
	}
	writeJSON(w, http.StatusOK, ans)
}

// batchItem parses one write of a batch into the queue write it makes:
// the write, its limits and its fingerprint are those of the same write
// sent alone.
func (s *Server) batchItem(r *http.Request, item json.RawMessage) (queue.Write, error) {
	// The whole body passed decodeObjectDepth's strict check at
	// MaxJSONDepth+2, so the write, two levels down, nests at most
	// MaxJSONDepth as a single write's body does: the same data limit.
	var bw batchWrite
	idField, dataField, keyField := &field{name: "id", dst: &bw.ID}, &field{name: "data", dst: &bw.Data}, &field{name: "idempotencyKey", dst: &bw.IdempotencyKey}
	if err := decodeFields(item, []*field{{name: "op", dst: &bw.Op, required: true}, {name: "type", dst: &bw.Type, required: true},
		idField, dataField, keyField}); err != nil {
		return queue.Write{}, err
	}
	if err := queue.ValidateEntityType(bw.Type); err != nil {
		return queue.Write{}, badRequest(CodeInvalidRequest, fmt.Sprintf("type %q must be 1 to %d letters, digits, '_', '-' or '.'", bw.Type, queue.MaxEntityTypeLen))
	}
	if err := s.lookupType(r, bw.Type); err != nil {
		return queue.Write{}, err
	}
	if (idField.present || bw.Op != "create") && validID(bw.ID, queue.ValidateEntityID) != nil {
		return queue.Write{}, badRequest(CodeInvalidRequest, `field "id" `+idProblem(queue.MaxEntityIDLen))
	}
	wr := queue.Write{EntityType: bw.Type, EntityID: bw.ID, Data: bw.Data, App: callerOf(r).appName()}
	switch bw.Op {
	case "create", "update":
		if err := requireObject("data", bw.Data); err != nil {
			return queue.Write{}, err
		}
		wr.Op = queue.OpCreate
		if bw.Op == "update" {
			wr.Op = queue.OpUpdate
		}
	case "delete":
		if dataField.present {
			return queue.Write{}, badRequest(CodeInvalidRequest, "a delete takes no data")
		}
		wr.Op, wr.Data = queue.OpDelete, nil
	default:
		return queue.Write{}, badRequest(CodeInvalidRequest, `op must be "create", "update" or "delete"`)
	}
	if keyField.present {
		if err := validID(bw.IdempotencyKey, queue.ValidateOperationID); err != nil {
			return queue.Write{}, badRequest(CodeInvalidRequest, fmt.Sprintf("idempotencyKey must be 1 to %d printable ASCII characters without spaces or '/', and not . or ..", queue.MaxOperationIDLen))
		}
	}
	if err := canonicalWrite(&wr, bw.IdempotencyKey); err != nil {
		return queue.Write{}, err
	}
	return wr, nil
}

// failIndex writes the error of the batch's write i, with "index".
func (s *Server) failIndex(w http.ResponseWriter, r *http.Request, i int, err error) {
	status, code, msg := s.describe(r, err)
	if status == http.StatusInternalServerError {
		writeError(w, status, code, msg) // not the write's fault
		return
	}
	var ans batchIndexError
	ans.Error.Code, ans.Error.Message, ans.Error.Index = code, fmt.Sprintf("write %d: %s; nothing of the batch was written", i, msg), i
	writeJSON(w, status, ans)
}
