package rendezvous

import (
	"encoding/json"
	"errors"
	"fmt"
)

// The rendezvous state machine. It does no I/O: Decide looks at the run's
// state document and one participant and says what that participant does
// next. The loop in rendezvous.go reads the document, calls Decide, writes
// with compare-and-set and waits, and simply decides again after a lost
// race or a spurious wake-up.

// Phase is where a generation stands.
type Phase string

// Phases of a generation.
const (
	// PhaseJoining: members are signing in; ranks are not assigned yet.
	PhaseJoining Phase = "joining"
	// PhaseComplete: all WorldSize members are in and ranks are assigned.
	PhaseComplete Phase = "complete"
)

// Errors of the state machine.
var (
	// ErrWorldSizeMismatch: a member asked for a world size other than the
	// one of the generation being joined.
	ErrWorldSizeMismatch = errors.New("world size differs from the generation being joined")
	// ErrBadState: the state document is unreadable or inconsistent.
	ErrBadState = errors.New("bad rendezvous state")
)

// Participant is a member as recorded in the state: the member plus the
// incarnation (a fresh random ID per Join call) that tells a restarted
// process from the one that joined before under the same member ID.
type Participant struct {
	Member
	Incarnation string `json:"incarnation"`
}

// State is the run's state document, stored as JSON at "<run>/state".
type State struct {
	Generation uint64        `json:"generation"`
	Phase      Phase         `json:"phase"`
	WorldSize  int           `json:"world_size"`
	Members    []Participant `json:"members"`         // in join order
	Ranks      []string      `json:"ranks,omitempty"` // member IDs, index = rank; set when complete
}

// Action is what a participant does next.
type Action int

// Actions Decide returns.
const (
	// ActionWrite: compare-and-set Decision.Next over the state read.
	ActionWrite Action = iota + 1
	// ActionWait: wait until the state changes, then decide again.
	ActionWait
	// ActionDone: the participant is in a complete generation.
	ActionDone
)

func (a Action) String() string {
	switch a {
	case ActionWrite:
		return "write"
	case ActionWait:
		return "wait"
	case ActionDone:
		return "done"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision is Decide's answer.
type Decision struct {
	Action Action
	Next   State // for ActionWrite
}

// Decide says what participant me does next given cur, the current state
// (nil when there is none yet), when it wants a gang of worldSize.
//
//   - no state: open generation 1 with me in it;
//   - a complete generation with me (same incarnation) in it: done;
//   - a complete generation without me, e.g. I restarted: open the next
//     generation with me in it; the members of the old one see the
//     generation move on and rejoin;
//   - a joining generation with me in it: wait;
//   - a joining generation with my ID under an older incarnation: take
//     over that slot;
//   - a joining generation without me: sign in; the member that fills the
//     last slot assigns the ranks and completes the generation.
func Decide(cur *State, me Participant, worldSize int) (Decision, error) {
	if worldSize < 1 {
		return Decision{}, fmt.Errorf("world size %d: must be at least 1", worldSize)
	}
	if cur == nil {
		return write(openGeneration(1, me, worldSize)), nil
	}
	if err := cur.validate(); err != nil {
		return Decision{}, err
	}
	i := cur.index(me.ID)
	switch cur.Phase {
	case PhaseComplete:
		if i >= 0 && cur.Members[i].Incarnation == me.Incarnation {
			return Decision{Action: ActionDone}, nil
		}
		return write(openGeneration(cur.Generation+1, me, worldSize)), nil
	case PhaseJoining:
		if cur.WorldSize != worldSize {
			return Decision{}, fmt.Errorf("%w: generation %d has %d, I want %d",
				ErrWorldSizeMismatch, cur.Generation, cur.WorldSize, worldSize)
		}
		if i >= 0 && cur.Members[i] == me {
			return Decision{Action: ActionWait}, nil
		}
		next := cur.clone()
		if i >= 0 {
			next.Members[i] = me
		} else {
			next.Members = append(next.Members, me)
		}
		next.completeIfFull()
		return write(next), nil
	}
	return Decision{}, fmt.Errorf("%w: unknown phase %q", ErrBadState, cur.Phase)
}

// Withdraw takes participant me out of a joining generation (a join that
// gave up). ok is false when there is nothing to withdraw.
func Withdraw(cur *State, me Participant) (next State, ok bool) {
	if cur == nil || cur.Phase != PhaseJoining {
		return State{}, false
	}
	i := cur.index(me.ID)
	if i < 0 || cur.Members[i].Incarnation != me.Incarnation {
		return State{}, false
	}
	next = cur.clone()
	next.Members = append(next.Members[:i], next.Members[i+1:]...)
	return next, true
}

func write(s State) Decision { return Decision{Action: ActionWrite, Next: s} }

func openGeneration(gen uint64, me Participant, worldSize int) State {
	s := State{Generation: gen, Phase: PhaseJoining, WorldSize: worldSize, Members: []Participant{me}}
	s.completeIfFull()
	return s
}

func (s *State) completeIfFull() {
	if len(s.Members) != s.WorldSize {
		return
	}
	peers := AssignRanks(s.members())
	s.Ranks = make([]string, len(peers))
	for r, p := range peers {
		s.Ranks[r] = p.ID
	}
	s.Phase = PhaseComplete
}

func (s *State) index(id string) int {
	for i, m := range s.Members {
		if m.ID == id {
			return i
		}
	}
	return -1
}

func (s *State) members() []Member {
	out := make([]Member, len(s.Members))
	for i, p := range s.Members {
		out[i] = p.Member
	}
	return out
}

func (s *State) clone() State {
	c := *s
	c.Members = append([]Participant(nil), s.Members...)
	c.Ranks = append([]string(nil), s.Ranks...)
	return c
}

// Peers returns the members of a complete generation in rank order.
func (s *State) Peers() ([]Member, error) {
	if s.Phase != PhaseComplete {
		return nil, fmt.Errorf("%w: generation %d is %s, not complete", ErrBadState, s.Generation, s.Phase)
	}
	peers := make([]Member, len(s.Ranks))
	for r, id := range s.Ranks {
		i := s.index(id)
		if i < 0 {
			return nil, fmt.Errorf("%w: rank %d names unknown member %q", ErrBadState, r, id)
		}
		peers[r] = s.Members[i].Member
	}
	return peers, nil
}

// validate checks what Decide relies on.
func (s *State) validate() error {
	if s.Generation == 0 || s.WorldSize < 1 || len(s.Members) > s.WorldSize {
		return fmt.Errorf("%w: generation %d, world size %d, %d members",
			ErrBadState, s.Generation, s.WorldSize, len(s.Members))
	}
	seen := make(map[string]bool, len(s.Members))
	for _, m := range s.Members {
		if seen[m.ID] {
			return fmt.Errorf("%w: member %q twice", ErrBadState, m.ID)
		}
		seen[m.ID] = true
	}
	if s.Phase == PhaseComplete {
		if len(s.Members) != s.WorldSize || len(s.Ranks) != s.WorldSize {
			return fmt.Errorf("%w: complete generation %d has %d members and %d ranks for world size %d",
				ErrBadState, s.Generation, len(s.Members), len(s.Ranks), s.WorldSize)
		}
		ranked := make(map[string]bool, len(s.Ranks))
		for _, id := range s.Ranks {
			if ranked[id] {
				return fmt.Errorf("%w: member %q holds two ranks", ErrBadState, id)
			}
			ranked[id] = true
		}
		if _, err := s.Peers(); err != nil {
			return err
		}
	}
	return nil
}

// decodeState parses a stored state; an absent key gives nil.
func decodeState(v Value) (*State, error) {
	if v.Version == 0 {
		return nil, nil
	}
	var s State
	if err := json.Unmarshal(v.Data, &s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadState, err)
	}
	return &s, nil
}
