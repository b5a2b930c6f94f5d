package queue

import "fmt"

// State is the state of an operation in the outgoing queue.
//
//	pending ──claim──▶ sending ──complete──▶ done
//	   ▲                 │ │ └──fail──▶ permanent_failed
//	   │                 │ └──retry at──▶ retry_waiting
//	   ├──lease expiry / release / restart─┘       │
//	   ├──────────── next_attempt_at reached ──────┘
//	   └──────────── user retry ◀── permanent_failed
//
// Two writes of Store.Apply record an operation done without sending it,
// outside this machine: a delete of an entity whose declined create never
// reached the server starts done (nothing to send), and an unsent update
// of a mergeable type goes from pending to done when a later write
// supersedes it (Operation.MergedInto). Neither is a transition a worker
// can make.
type State string

// The operation states. Their string values are stored in the file and
// shown over the API; they never change.
const (
	StatePending         State = "pending"
	StateSending         State = "sending"
	StateRetryWaiting    State = "retry_waiting"
	StateDone            State = "done"
	StatePermanentFailed State = "permanent_failed"
)

// States lists every state, in the order status screens show them.
var States = []State{StatePending, StateSending, StateRetryWaiting, StatePermanentFailed, StateDone}

// transitions is the whole state machine: from → allowed destinations.
var transitions = map[State][]State{
	StatePending:         {StateSending},
	StateSending:         {StateDone, StateRetryWaiting, StatePermanentFailed, StatePending},
	StateRetryWaiting:    {StatePending},
	StatePermanentFailed: {StatePending},
	StateDone:            nil,
}

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool {
	_, ok := transitions[s]
	return ok
}

// CanTransition reports whether the state machine allows s → to.
func (s State) CanTransition(to State) bool {
	for _, t := range transitions[s] {
		if t == to {
			return true
		}
	}
	return false
}

// ParseState returns the State named by s.
func ParseState(s string) (State, error) {
	if st := State(s); st.Valid() {
		return st, nil
	}
	return "", fmt.Errorf("queue: unknown state %q", s)
}

// transition moves op to the state to, or returns a *TransitionError.
func (op *Operation) transition(to State) error {
	if !op.State.CanTransition(to) {
		return &TransitionError{OperationID: op.ID, From: op.State, To: to}
	}
	op.State = to
	return nil
}
